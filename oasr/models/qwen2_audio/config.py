"""``Qwen2AudioConfig``: the audio tower's and the language model's shapes, and the prompt.

The token ids and the ChatML template are recorded by the converter from the checkpoint's own
config.json and tokenizer, never from a table of releases. The prompt is assembled from
``chat_template`` (``{system}`` and ``{instruction}`` substituted); ``audio_placeholder`` marks
where the audio goes, and each row expands it to ``<|AUDIO|>`` x its audio frames, as
transformers' processor does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from oasr.models.config_dict import DictConfig

# Qwen2-Audio-Instruct's chat layout (its processor's default chat template, rendered).
CHATML_TEMPLATE = (
    "<|im_start|>system\n{system}<|im_end|>\n"
    "<|im_start|>user\nAudio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\n{instruction}<|im_end|>\n"
    "<|im_start|>assistant\n"
)
DEFAULT_SYSTEM = "You are a helpful assistant."
DEFAULT_INSTRUCTION = "Transcribe the audio into text."


@dataclass
class Qwen2AudioConfig(DictConfig):
    """Qwen2-Audio's shape and prompt metadata.

    Audio tower (Whisper's encoder, masked over the valid frames, then ``AvgPool1d(2)``):
        n_mels, audio_d_model, audio_layers, audio_heads, audio_ffn_dim,
        max_source_positions (1500: 30 s of 10 ms frames after the stride-2 conv).
    Language model (Qwen2): vocab_size, hidden_size, intermediate_size, num_hidden_layers,
        num_attention_heads, num_key_value_heads (GQA), rms_norm_eps, rope_theta,
        max_position_embeddings, tie_word_embeddings.
    Prompt: audio_token_id (``<|AUDIO|>``), eos_token_ids (every id that ends a turn),
        pad_token_id (left padding; never attended), chat_template / system_prompt /
        instruction (the default ``llm_prompt``).
    """

    n_mels: int = 128
    audio_d_model: int = 1280
    audio_layers: int = 32
    audio_heads: int = 20
    audio_ffn_dim: int = 5120
    max_source_positions: int = 1500
    vocab_size: int = 156032
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int = 32
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 8192
    tie_word_embeddings: bool = False
    audio_token_id: int = 151646
    eos_token_ids: list[int] = field(default_factory=lambda: [151643, 151645])
    pad_token_id: int = 151643
    chat_template: str = CHATML_TEMPLATE
    system_prompt: str = DEFAULT_SYSTEM
    instruction: str = DEFAULT_INSTRUCTION
    audio_placeholder: str = "<|AUDIO|>"

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def audio_frames(self) -> int:
        """Audio embeddings of a full window: the pooled encoder length."""
        return self.max_source_positions // 2

    def validate(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.audio_d_model % self.audio_heads:
            raise ValueError("audio_d_model must be a multiple of audio_heads")
        if not self.eos_token_ids:
            raise ValueError("eos_token_ids is empty: nothing would end a generation")
        if self.chat_template.count(self.audio_placeholder) != 1:
            raise ValueError(f"chat_template must hold {self.audio_placeholder!r} exactly once")

    def render_prompt(self, instruction: str | None = None) -> tuple[str, str]:
        """The ChatML text before and after the audio placeholder, for ``instruction``
        (``None``: the checkpoint's default)."""
        text = self.chat_template.replace("{system}", self.system_prompt).replace(
            "{instruction}", self.instruction if instruction is None else instruction)
        before, _, after = text.partition(self.audio_placeholder)
        return before, after

