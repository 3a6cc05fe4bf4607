"""Structured mutations of encoded audio, for the decoder fuzz test.

Each container is parsed just far enough to know where its header fields and chunk (block,
frame, page) boundaries are; the mutations then lie in those fields (sizes, rates, channels,
bit depths, counts), flip bytes inside the headers, truncate at and around every boundary, and
empty the data. Ogg pages get their CRC recomputed after a change, so the lie reaches the
decoder instead of the page being dropped by libogg's checksum. Random bytes (bare, and behind
each container's magic) come from seeded generators: every case is the same on every run.

A case is ``(name, data)``; the name says what was changed, for the failure message.
"""

from __future__ import annotations

import io
import random
import struct
from collections.abc import Iterator

import numpy as np
import soundfile as sf

Case = tuple[str, bytes]

__all__ = ["Case", "encode", "flac_cases", "mp3_cases", "ogg_cases", "random_cases",
           "wav_cases"]


def encode(fmt: str, subtype: str | None = None, sample_rate: int = 16000,
           seconds: float = 0.25, channels: int = 1) -> bytes:
    """A short tone encoded by libsndfile."""
    n = int(sample_rate * seconds)
    t = np.arange(n * channels, dtype=np.float32).reshape(n, channels)
    x = (0.2 * np.sin(t * 0.05)).astype(np.float32)
    buf = io.BytesIO()
    sf.write(buf, x, sample_rate, format=fmt, subtype=subtype)
    return buf.getvalue()


def _put(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def _byte_flips(name: str, data: bytes, start: int, stop: int) -> Iterator[Case]:
    """Each byte of ``data[start:stop]`` set to 0, to 0xFF and with its top bit flipped."""
    for i in range(start, min(stop, len(data))):
        for label, value in (("0", 0), ("ff", 0xFF), ("x80", data[i] ^ 0x80)):
            if value != data[i]:
                out = bytearray(data)
                out[i] = value
                yield f"{name} byte {i} = {label}", bytes(out)


def _truncations(name: str, data: bytes, boundaries: list[int]) -> Iterator[Case]:
    cuts = sorted({c for b in boundaries for c in (b - 1, b, b + 1) if 0 < c < len(data)})
    for c in cuts:
        yield f"{name} truncated at {c}/{len(data)}", data[:c]


# ----------------------------------------------------------------------------- WAV


def _riff_chunks(data: bytes) -> list[tuple[bytes, int, int]]:
    """(id, offset of the chunk header, payload size) of each chunk after ``RIFF....WAVE``."""
    chunks, pos = [], 12
    while pos + 8 <= len(data):
        cid, size = data[pos:pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        chunks.append((cid, pos, size))
        pos += 8 + size + (size & 1)
    return chunks


def wav_cases(name: str, data: bytes) -> Iterator[Case]:
    chunks = _riff_chunks(data)
    fmt = next(off for cid, off, _ in chunks if cid == b"fmt ")
    dat, dsize = next((off, size) for cid, off, size in chunks if cid == b"data")
    f = fmt + 8  # the fmt payload: tag, channels, rate, byte rate, block align, bits
    yield from _byte_flips(name, data, 0, dat + 8)
    lies = [
        ("format tag", f, "<H", (0, 2, 3, 0x55, 0xFFFE, 0xFFFF)),
        ("channels", f + 2, "<H", (0, 2, 7, 255, 0xFFFF)),
        ("sample rate", f + 4, "<I", (0, 1, 8000, 44100, 0x7FFFFFFF, 0xFFFFFFFF)),
        ("byte rate", f + 8, "<I", (0, 1, 0xFFFFFFFF)),
        ("block align", f + 12, "<H", (0, 1, 3, 0xFFFF)),
        ("bits", f + 14, "<H", (0, 1, 7, 8, 12, 24, 32, 64, 0xFFFF)),
        ("RIFF size", 4, "<I", (0, 4, len(data) - 9, len(data), 0xFFFFFFFF)),
        ("fmt size", fmt + 4, "<I", (0, 2, 14, 18, 40, 0xFFFFFFFF)),
        ("data size", dat + 4, "<I", (0, 1, dsize - 1, dsize + 1, 2 * dsize, 0x7FFFFFFF,
                                      0xFFFFFFFF)),
    ]
    for field, offset, form, values in lies:
        for v in values:
            yield f"{name} {field} = {v}", _put(data, offset, form, v)
    yield from _truncations(name, data, [12] + [off for _, off, _ in chunks] + [dat + 8])
    empty = _put(data[:dat + 8], dat + 4, "<I", 0)
    yield f"{name} zero-length data", _put(empty, 4, "<I", len(empty) - 8)


# ----------------------------------------------------------------------------- FLAC


def flac_cases(name: str, data: bytes) -> Iterator[Case]:
    assert data[:4] == b"fLaC"
    blocks, pos = [], 4
    while True:
        head = data[pos]
        size = int.from_bytes(data[pos + 1:pos + 4], "big")
        blocks.append(pos)
        pos += 4 + size
        if head & 0x80:
            break
    frames_at = pos
    si = 8  # STREAMINFO payload
    packed = int.from_bytes(data[si + 10:si + 18], "big")  # rate 20, ch-1 3, bps-1 5, total 36

    def streaminfo(**fields: int) -> bytes:
        rate = fields.get("rate", packed >> 44)
        ch = fields.get("ch", (packed >> 41) & 0x7)
        bps = fields.get("bps", (packed >> 36) & 0x1F)
        total = fields.get("total", packed & ((1 << 36) - 1))
        value = (rate << 44) | (ch << 41) | (bps << 36) | total
        return data[:si + 10] + value.to_bytes(8, "big") + data[si + 18:]

    yield from _byte_flips(name, data, 0, si + 34)
    yield from _byte_flips(name, data, frames_at, frames_at + 16)
    for v in (0, 1, 8000, 655350, (1 << 20) - 1):
        yield f"{name} STREAMINFO rate = {v}", streaminfo(rate=v)
    for v in range(8):
        yield f"{name} STREAMINFO channels = {v + 1}", streaminfo(ch=v)
    for v in (0, 2, 7, 15, 23, 31):
        yield f"{name} STREAMINFO bits = {v + 1}", streaminfo(bps=v)
    for v in (0, 1, 1 << 20, (1 << 36) - 1):
        yield f"{name} STREAMINFO total samples = {v}", streaminfo(total=v)
    for field, offset, values in (("min block", si, (0, 1, 15, 0xFFFF)),
                                  ("max block", si + 2, (0, 1, 15, 0xFFFF))):
        for v in values:
            yield f"{name} STREAMINFO {field} = {v}", _put(data, offset, ">H", v)
    for v in (0, 33, 35, 0xFFFFFF):
        yield f"{name} STREAMINFO length = {v}", data[:5] + v.to_bytes(3, "big") + data[8:]
    yield f"{name} not last block", bytes([data[4] & 0x7F]).join([data[:4], data[5:]])
    boundaries = blocks + [frames_at]
    sync = frames_at
    while (sync := data.find(b"\xff\xf8", sync + 2)) > 0:
        boundaries.append(sync)
    yield from _truncations(name, data, boundaries)
    yield f"{name} no frames", data[:frames_at]


# ----------------------------------------------------------------------------- MP3


def _mp3_frames(data: bytes) -> list[int]:
    """Offsets of the MPEG audio frame headers (after any ID3v2 tag), by walking lengths."""
    pos = 0
    if data[:3] == b"ID3":
        size = 0
        for b in data[6:10]:
            size = (size << 7) | (b & 0x7F)
        pos = 10 + size
    rates = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}
    kbps1 = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320)
    kbps2 = (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)
    frames = []
    while pos + 4 <= len(data) and data[pos] == 0xFF and data[pos + 1] & 0xE0 == 0xE0:
        h = int.from_bytes(data[pos:pos + 4], "big")
        version, bitrate, sr, pad = (h >> 19) & 3, (h >> 12) & 0xF, (h >> 10) & 3, (h >> 9) & 1
        if version == 1 or bitrate in (0, 15) or sr == 3:
            break
        rate = rates[version][sr]
        kbps = (kbps1 if version == 3 else kbps2)[bitrate]
        length = (144 if version == 3 else 72) * kbps * 1000 // rate + pad
        frames.append(pos)
        pos += length
    return frames


def mp3_cases(name: str, data: bytes) -> Iterator[Case]:
    frames = _mp3_frames(data)
    assert frames, "no MPEG frame found"
    first = frames[0]
    yield from _byte_flips(name, data, 0, first + 4)
    for f in frames[:3]:
        h = int.from_bytes(data[f:f + 4], "big")
        for field, shift, width, values in (("version", 19, 2, (0, 1, 2)),
                                            ("layer", 17, 2, (0, 1, 3)),
                                            ("bitrate", 12, 4, (0, 1, 14, 15)),
                                            ("sample rate", 10, 2, (0, 1, 2, 3)),
                                            ("channel mode", 6, 2, (0, 1, 2, 3))):
            for v in values:
                mask = ((1 << width) - 1) << shift
                new = (h & ~mask) | (v << shift)
                if new != h:
                    yield (f"{name} frame@{f} {field} = {v}",
                           data[:f] + new.to_bytes(4, "big") + data[f + 4:])
    # The first frame is often a Xing/Info frame: lie about its frame and byte counts.
    xing = data.find(b"Xing", first, first + 64)
    if xing < 0:
        xing = data.find(b"Info", first, first + 64)
    if xing >= 0:
        for v in (0, 1, 0x7FFFFFFF, 0xFFFFFFFF):
            yield f"{name} Xing frames = {v}", _put(data, xing + 8, ">I", v)
            yield f"{name} Xing bytes = {v}", _put(data, xing + 12, ">I", v)
    for size in (0, 1, 1 << 20, (1 << 28) - 1):
        syncsafe = bytes((size >> s) & 0x7F for s in (21, 14, 7, 0))
        yield f"{name} ID3 size = {size}", b"ID3\x04\x00\x00" + syncsafe + data[first:]
    yield from _truncations(name, data, frames[:6] + [first + 2])
    yield f"{name} one frame", data[:frames[1]] if len(frames) > 1 else data


# ----------------------------------------------------------------------------- Ogg


def _ogg_crc(page: bytes) -> int:
    crc = 0
    for byte in page:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
            crc &= 0xFFFFFFFF
    return crc


def _ogg_pages(data: bytes) -> list[tuple[int, int]]:
    """(offset, length) of each page."""
    pages, pos = [], 0
    while pos + 27 <= len(data) and data[pos:pos + 4] == b"OggS":
        nseg = data[pos + 26]
        body = sum(data[pos + 27:pos + 27 + nseg])
        length = 27 + nseg + body
        pages.append((pos, length))
        pos += length
    return pages


def _reseal(data: bytes, page: tuple[int, int]) -> bytes:
    """``data`` with ``page``'s CRC recomputed."""
    off, length = page
    body = bytearray(data[off:off + length])
    body[22:26] = b"\0\0\0\0"
    struct.pack_into("<I", body, 22, _ogg_crc(bytes(body)))
    return data[:off] + bytes(body) + data[off + length:]


def ogg_cases(name: str, data: bytes) -> Iterator[Case]:
    pages = _ogg_pages(data)
    assert pages, "no Ogg page found"
    first = pages[0]
    for label, mutated in _byte_flips(name, data, 0, first[1]):
        yield f"{label} (CRC fixed)", _reseal(mutated, first)
    # Byte flips without fixing the CRC: the page is dropped, the stream starts elsewhere.
    yield from _byte_flips(name, data, pages[1][0], pages[1][0] + 27)
    for k, page in enumerate(pages[:4]):
        off = page[0]
        for field, rel, form, values in (
                ("header type", 5, "<B", (0, 1, 2, 4, 0xFF)),
                ("granule", 6, "<q", (0, 1, -1, 1 << 40, (1 << 63) - 1)),
                ("serial", 14, "<I", (0, 0xFFFFFFFF)),
                ("sequence", 18, "<I", (0, 7, 0xFFFFFFFF))):
            for v in values:
                yield (f"{name} page {k} {field} = {v}",
                       _reseal(_put(data, off + rel, form, v), page))
    # The codec's identification header (Vorbis: channels at 11, rate at 12 of the packet).
    ident = first[0] + 27 + data[first[0] + 26]
    if data[ident + 1:ident + 7] == b"vorbis":
        for field, rel, form, values in (("channels", 11, "<B", (0, 2, 9, 255)),
                                         ("rate", 12, "<I", (0, 1, 0x7FFFFFFF, 0xFFFFFFFF)),
                                         ("blocksizes", 28, "<B", (0x00, 0xFF, 0x66))):
            for v in values:
                yield (f"{name} vorbis {field} = {v}",
                       _reseal(_put(data, ident + rel, form, v), first))
    last = pages[-1]
    yield (f"{name} last granule huge",
           _reseal(_put(data, last[0] + 6, "<q", (1 << 62)), last))
    yield from _truncations(name, data, [off for off, _ in pages])
    yield f"{name} headers only", data[:pages[min(2, len(pages) - 1)][0]]


# ----------------------------------------------------------------------------- random


def random_cases(seed: int, count: int) -> Iterator[Case]:
    """Random bytes, bare and behind each container's magic, of sizes from 1 byte to 4 KiB."""
    rng = random.Random(seed)
    prefixes = (b"", b"RIFF\xff\xff\xff\xffWAVEfmt ", b"fLaC\x00\x00\x00\x22", b"OggS\x00\x02",
                b"ID3\x04\x00\x00\x00\x00\x00\x00\xff\xfb", b"\xff\xfb\x90\x64",
                b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00")
    for k in range(count):
        prefix = prefixes[k % len(prefixes)]
        size = rng.choice((1, 3, 17, 44, 100, 512, 4096))
        yield f"random seed {seed} case {k} ({len(prefix)}-byte magic + {size})", \
            prefix + rng.randbytes(size)
