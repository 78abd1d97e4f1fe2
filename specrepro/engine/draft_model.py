"""A small draft q with a reduced output vocabulary, shaped like a transformers causal LM for the engine.

The draft is a short Llama (``n_layers`` decoder layers, the target's width, so it is initialised from the
target's embeddings and first layers) whose LM head covers only the ``N`` kept token ids (the most frequent
ones in target-generated text). Every id outside the kept set gets logit −inf, so q is exactly 0 there: the
verification loop uses q as given, so speculative sampling stays exact (a kept-set q is just another q).
Input ids outside the kept set share one "other" embedding (row N of the embedding table).

The wrapper answers what the engine asks of a model: ``forward(input_ids, cache, use_cache)``
returning ``.logits`` [B, T, V] over the target's full vocabulary, ``.config`` (the inner Llama config, which
``DynamicCache(config=...)`` reads for its layer count), ``parameters()``, and ``output_vocab_size`` (V, for
``LoadedModel.vocab_size`` / ``check_pair``).

A saved draft is a folder: ``model.safetensors`` (bf16 weights and the kept ids), ``draft_config.json``
(what builds it) and, where given, the tokenizer it shares with its target.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, LlamaConfig, LlamaModel
from transformers.modeling_outputs import CausalLMOutputWithPast

DRAFT_CONFIG = "draft_config.json"  # the file that marks a folder as a reduced-vocabulary draft
WEIGHTS = "model.safetensors"


class ReducedVocabDraft(torch.nn.Module):
    def __init__(self, config: LlamaConfig, kept_ids: torch.Tensor, full_vocab_size: int):
        super().__init__()
        n_kept = int(kept_ids.numel())
        if config.vocab_size != n_kept + 1:
            raise ValueError(f"the inner vocabulary must be the {n_kept} kept ids + 1 'other', got {config.vocab_size}")
        self.config = config
        self.output_vocab_size = full_vocab_size  # V: what the logits cover, what check_pair compares
        self.n_kept = n_kept
        self.model = LlamaModel(config)
        self.register_buffer("kept_ids", kept_ids.long().clone())  # [N] full-vocabulary id of each kept token
        token_map = torch.full((full_vocab_size,), n_kept, dtype=torch.long)  # [V] full id -> draft index
        token_map[self.kept_ids] = torch.arange(n_kept)
        self.register_buffer("token_map", token_map, persistent=False)

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.model.embed_tokens

    def reduced_engine_parts(self):
        """What ``specrepro.engine.attach`` runs: (decoder, head [N, H], token_map [V], kept_ids [N], V)."""
        return self.model, self.model.embed_tokens.weight[: self.n_kept], self.token_map, self.kept_ids, \
            self.output_vocab_size

    def reduced_logits(self, input_ids: torch.Tensor, cache=None, use_cache: bool | None = None,
                       attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, object]:
        """Logits over the kept ids only: [B, T, N] (the training loss reads these), and the cache."""
        out = self.model(input_ids=self.token_map[input_ids], cache=cache,
                         use_cache=use_cache, attention_mask=attention_mask)
        head = self.model.embed_tokens.weight[: self.n_kept]  # tied head, without the "other" row  # [N, H]
        return torch.nn.functional.linear(out.last_hidden_state, head), out.cache  # [B, T, N]

    def forward(self, input_ids: torch.Tensor, cache=None, use_cache: bool | None = None,
                attention_mask: torch.Tensor | None = None, **_) -> CausalLMOutputWithPast:
        """transformers' causal-LM forward (its ``generate`` passes the KV cache as ``cache``)."""
        z, cache = self.reduced_logits(input_ids, cache, use_cache, attention_mask)  # [B, T, N]
        logits = z.new_full((*z.shape[:-1], self.output_vocab_size), float("-inf"))  # [B, T, V]
        logits.index_copy_(-1, self.kept_ids, z)
        return CausalLMOutputWithPast(logits=logits, cache=cache)


def draft_from_target(target: torch.nn.Module, kept_ids: torch.Tensor, n_layers: int,
                      dtype: torch.dtype = torch.float32) -> ReducedVocabDraft:
    """A draft initialised from a Llama-like target: its first ``n_layers`` layers, final norm and the kept
    rows of its (tied) embeddings; the "other" embedding is the mean of the rows that were not kept."""
    tcfg = target.config
    if not 1 <= n_layers <= tcfg.num_hidden_layers:
        raise ValueError(f"n_layers must be in 1..{tcfg.num_hidden_layers}, got {n_layers}")
    cfg = LlamaConfig(**{**tcfg.to_dict(), "num_hidden_layers": n_layers, "vocab_size": int(kept_ids.numel()) + 1,
                         "tie_word_embeddings": True, "layer_types": None, "architectures": None})
    draft = ReducedVocabDraft(cfg, kept_ids, tcfg.vocab_size)
    emb = target.get_input_embeddings().weight.detach().float()  # [V, H]
    with torch.no_grad():
        other = torch.ones(tcfg.vocab_size, dtype=torch.bool)
        other[kept_ids] = False
        rest = emb[other].mean(0, keepdim=True) if other.any() else torch.zeros_like(emb[:1])  # [1, H]
        rows = torch.cat([emb[kept_ids], rest])  # [N + 1, H]; "other" never occurs when every id is kept
        draft.model.embed_tokens.weight.copy_(rows)
        for i in range(n_layers):
            draft.model.layers[i].load_state_dict(target.model.layers[i].state_dict())
        draft.model.norm.load_state_dict(target.model.norm.state_dict())
    return draft.to(dtype)


def save_draft(draft: ReducedVocabDraft, folder: str | Path, tokenizer=None, **info) -> Path:
    """Write bf16 weights, the kept ids and the config (plus ``info``) into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in draft.model.state_dict().items()}
    state["kept_ids"] = draft.kept_ids.cpu().contiguous()
    save_file(state, str(folder / WEIGHTS))
    meta = {"llama_config": draft.config.to_dict(), "full_vocab_size": draft.output_vocab_size,
            "n_kept": draft.n_kept, **info}
    (folder / DRAFT_CONFIG).write_text(json.dumps(meta, indent=2, default=str))
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return folder


def is_draft_folder(path: str | Path) -> bool:
    return (Path(path) / DRAFT_CONFIG).is_file()


def load_draft_model(folder: str | Path, dtype: torch.dtype = torch.bfloat16,
                     device: str | torch.device = "cpu") -> tuple[ReducedVocabDraft, object]:
    """(draft, tokenizer or None) from a folder written by ``save_draft``; eval mode, no gradients."""
    folder = Path(folder)
    meta = json.loads((folder / DRAFT_CONFIG).read_text())
    state = load_file(str(folder / WEIGHTS))
    kept_ids = state.pop("kept_ids")
    cfg = LlamaConfig(**meta["llama_config"])
    draft = ReducedVocabDraft(cfg, kept_ids, meta["full_vocab_size"])
    draft.model.load_state_dict({k: v.float() for k, v in state.items()})
    tokenizer = AutoTokenizer.from_pretrained(folder) if (folder / "tokenizer_config.json").exists() else None
    return draft.to(device=device, dtype=dtype).eval().requires_grad_(False), tokenizer
