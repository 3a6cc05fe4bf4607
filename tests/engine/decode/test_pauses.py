import numpy as np

from oasr.engine.decode.pauses import quiet_frames, speech_pauses

SR = 16000


def _noise(seconds: float, db: float, rng: np.random.Generator) -> np.ndarray:
    return (rng.standard_normal(int(seconds * SR)) * 10 ** (db / 20)).astype(np.float32)


def _tone(seconds: float, db: float) -> np.ndarray:
    t = np.arange(int(seconds * SR)) / SR
    return (np.sin(2 * np.pi * 220 * t) * np.sqrt(2) * 10 ** (db / 20)).astype(np.float32)


def test_a_pause_27_db_under_the_speech_is_found_in_recorded_noise():
    # Speech at -18 dB, noise at -45 dB: no frame is 40 dB under the speech, yet the 0.5 s of
    # noise between the two words is a pause (12 dB within the floor).
    rng = np.random.default_rng(0)
    audio = np.concatenate([_tone(1.0, -18), _noise(0.5, -45, rng), _tone(1.0, -18)])
    audio[: len(audio)] += _noise(len(audio) / SR, -45, rng)
    starts, ends = speech_pauses(audio, SR, 0.02)
    assert len(starts) == 1
    assert abs(starts[0] * 0.02 - 1.0) <= 0.02 and abs(ends[0] * 0.02 - 1.5) <= 0.02


def test_levels_do_not_reach_across_digital_silence():
    # Recording A (noise -46 dB, speech -18 dB), 0.6 s of zeros, recording B (noise -78 dB,
    # speech -30 dB). A's 0.5 s of trailing noise is a pause even though B's floor is 30 dB lower.
    rng = np.random.default_rng(1)
    a = np.concatenate([_tone(1.5, -18) + _noise(1.5, -46, rng), _noise(0.5, -46, rng)])
    b = np.concatenate([_noise(0.5, -78, rng), _tone(1.5, -30) + _noise(1.5, -78, rng)])
    audio = np.concatenate([a, np.zeros(int(0.6 * SR), np.float32), b])
    quiet = quiet_frames(audio, SR)
    frame = 0.01
    assert not quiet[int(1.0 / frame)] and not quiet[int(3.5 / frame)]  # the speech
    assert quiet[int(1.55 / frame):int(2.0 / frame)].all()  # A's trailing noise
    assert quiet[int(2.65 / frame):int(3.05 / frame)].all()  # B's leading noise


def test_a_click_does_not_end_a_pause_and_an_edge_pause_counts_shorter():
    rng = np.random.default_rng(2)
    click = _tone(0.02, -20)
    audio = np.concatenate([_noise(0.15, -50, rng), _tone(1.0, -18), _noise(0.2, -50, rng),
                            click, _noise(0.2, -50, rng), _tone(1.0, -18)])
    starts, ends = speech_pauses(audio, SR, 0.02)
    # The 0.15 s at the start counts (an edge); the 0.42 s around the click is one pause.
    assert starts.tolist()[0] == 0.0 and abs(ends[0] * 0.02 - 0.15) <= 0.02
    assert len(starts) == 2 and abs((ends[1] - starts[1]) * 0.02 - 0.42) <= 0.03


def test_a_40_ms_burst_before_the_speech_ends_the_pause():
    # The speech-edges reference counts 3 loud 10 ms frames as speech: a 40 ms burst 0.25 s
    # before the word ends the pause there (the next word's start and a window's resume point
    # follow it), where the 20 ms click above does not.
    rng = np.random.default_rng(4)
    audio = np.concatenate([_tone(1.0, -18), _noise(0.6, -50, rng), _tone(0.04, -35),
                            _noise(0.25, -50, rng), _tone(1.0, -18)])
    starts, ends = speech_pauses(audio, SR, 0.02)
    assert len(starts) == 1
    assert abs(starts[0] * 0.02 - 1.0) <= 0.02 and abs(ends[0] * 0.02 - 1.6) <= 0.02
    quiet = quiet_frames(audio, SR)
    assert not quiet[int(1.61 / 0.01):int(1.63 / 0.01)].any()  # the burst
    assert quiet[int(1.65 / 0.01):int(1.88 / 0.01)].all()  # 0.25 s: no pause of its own


def test_pauses_are_in_fractional_frames_of_the_clock():
    rng = np.random.default_rng(3)
    audio = np.concatenate([_tone(0.5, -18), _noise(0.45, -60, rng), _tone(0.5, -18)])
    s20, e20 = speech_pauses(audio, SR, 0.02)
    s40, e40 = speech_pauses(audio, SR, 0.04)
    assert np.allclose(s20 * 0.02, s40 * 0.04) and np.allclose(e20 * 0.02, e40 * 0.04)
