"""The `hf-grpo` runner: GRPO on a real transformer (a Llama-style causal LM), two-sided.

What is real here: a `transformers.LlamaForCausalLM` built from a `LlamaConfig` (random
init, nothing downloaded), a character tokenizer built in code, prompts and a verifiable
reward generated in code (single-digit addition, "3+4=" -> "7"), GRPO (group-normalised
advantages, the clipped probability ratio, an optional KL penalty to the initial policy)
and AdamW. Nothing sleeps: a phase takes the time its compute takes.

- The rollout side (one per rollout GPU) samples `GROUP` responses per prompt with the
  weights it last received, scores them and returns the batch (token ids, the sampling
  log-probabilities, the rewards) for the trainers.
- The trainer side (one per training GPU) updates on every rollout rank's batch of the
  iteration (every trainer takes the same step on the same data, so the replicas stay
  identical, as data-parallel ranks after their all-reduce). `send_weights` returns the
  policy's real tensors (a name -> numpy view dict, no copy); the pool worker cuts them into
  one shard per rollout worker (whole tensors, balanced by bytes) and moves them through
  Ray's object store (workers/dispatch/pool.py): one copy of the weights crosses the pools
  per sync, counted as `cross_pool_bytes` and `PhaseReport.bytes_moved`.
- offload/reload (residency, a warm start): the model's parameters and AdamW's moments are
  copied into one contiguous host buffer (pinned memory with CUDA; a shared-memory segment
  on the CPU) and the live tensors are dropped (each parameter's storage emptied), so the
  model holds no state between phases; reload copies them back to the device (CUDA) or into
  fresh process memory (CPU). On a CPU that is two memcpys of the state: see
  docs/real-rl-jobs.md for why this is far cheaper than a GPU's host-to-device copy is
  relative to its work.
- checkpoint/restore: safetensors bytes of the model, AdamW's state, the update count and
  the RNG states (the coordinator writes them to ROLLMUX_CHECKPOINT_URI,
  workers/dispatch/storage.py). A checkpoint that does not parse, or lacks a tensor, fails
  the restore naming the problem (never a silent step 0).
- device: CUDA on the GPUs Ray assigned the worker (CUDA_VISIBLE_DEVICES) when there are
  any, else the CPU with ONE torch thread per worker (`ROLLMUX_TORCH_THREADS`): several
  resident workers of several jobs share a node's cores, and torch's default (a thread per
  core each) oversubscribes them (measured: slower, not faster, for models this small).

The model's size comes from the job's `model` name ("llama-0.1M", "llama-25M"; no size:
the ~0.1M default, which learns the task in a few dozen iterations on one CPU core); its
shape is `scheduler.model_shape.llama_shape`, which submission also reads to check that
the job's `host_mem_gb` holds the state.
"""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from dataclasses import asdict
from typing import Any

from scheduler.model_shape import VOCAB as SHAPE_VOCAB
from scheduler.model_shape import llama_shape
from workers.runners.base import RunnerContext, WorkerContext

# --- the task: single-digit addition ----------------------------------------------------

PAD, BOS, EOS = 0, 1, 2
CHARS = "0123456789+="
VOCAB = 3 + len(CHARS)
assert VOCAB == SHAPE_VOCAB
PROMPT_LEN = 5  # BOS a + b =
MAX_NEW_TOKENS = 3  # up to two digits and EOS


def encode(text: str) -> list[int]:
    """Return the token ids of `text` (characters of CHARS)."""
    return [3 + CHARS.index(c) for c in text]


def decode(ids: list[int]) -> str:
    """Return the text of token ids up to the first EOS (specials dropped)."""
    out = []
    for i in ids:
        if i == EOS:
            break
        if i >= 3:
            out.append(CHARS[i - 3])
    return "".join(out)


def reward(a: int, b: int, response: list[int]) -> float:
    """Return the verifiable reward of a response: 1 for the exact sum followed by EOS; for
    a well-formed wrong number, less the further it is from the sum (0.5 at 1 off, 0 at 5
    or more: a graded signal so that the first iterations learn); 0 for anything else."""
    text = decode(response)
    if EOS not in response or not text.isdigit():
        return 0.0
    off = abs(int(text) - (a + b))
    return 1.0 if off == 0 else max(0.0, 0.5 - 0.1 * (off - 1))


# --- the model -------------------------------------------------------------------------


# transformers' lazy imports are not thread-safe: two jobs' hosts setting up at once in one
# process (the in-process dispatcher) made one of them fail "cannot import name
# 'LlamaForCausalLM'"
_IMPORT_LOCK = threading.Lock()


def _llama_classes() -> tuple[Any, Any]:
    """Return (LlamaConfig, LlamaForCausalLM), imported once under a lock."""
    with _IMPORT_LOCK:
        from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaConfig, LlamaForCausalLM


def llama_config(model: str) -> Any:
    """Return the LlamaConfig of a job's model name (its shape: scheduler.model_shape)."""
    LlamaConfig, _ = _llama_classes()  # noqa: N806
    shape = llama_shape(model)
    return LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads,
        max_position_embeddings=PROMPT_LEN + MAX_NEW_TOKENS + 1,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        tie_word_embeddings=False,
    )


# --- hyper-parameters -------------------------------------------------------------------

OPERANDS = 5  # a + b with a, b in 0..4: the sum is one digit
GROUP = 8  # responses per prompt (the GRPO group)
PROMPTS_PER_ROLLOUT = 32  # over the job's rollout workers
LEARNING_RATE = 3e-3
CLIP = 0.2  # the ratio's clip range (PPO/GRPO)
KL_COEF = 0.0  # > 0: a KL penalty to the initial (reference) policy, the k3 estimator
EPOCHS = 2  # passes over each iteration's batch (the clipped ratio matters from the second)
TEMPERATURE = 1.0


def torch_threads() -> int:
    return max(1, int(os.environ.get("ROLLMUX_TORCH_THREADS", "1")))


def _device(ctx: WorkerContext) -> Any:
    """Return the worker's device: the first GPU Ray assigned it, else the CPU."""
    import torch

    if not torch.cuda.is_available():
        return torch.device("cpu")  # (GPUs declared by a CPU machine's Ray nodes: tests)
    visible = torch.cuda.device_count()
    if visible != len(ctx.gpu_ids):
        # Ray sets CUDA_VISIBLE_DEVICES to what it assigned: seeing others means the worker
        # would use GPUs another job was given
        field = "rollout_gpus" if ctx.role == "rollout" else "train_gpus"
        raise RuntimeError(
            f"{ctx.role} worker {ctx.rank} on {ctx.node} sees {visible} CUDA devices but Ray"
            f" gave it {list(ctx.gpu_ids) or 'none'} (the job's {field}): it will not use"
            " GPUs it was not given"
        )
    return torch.device("cuda", 0)


def build_model(ctx: RunnerContext) -> Any:
    """Return the job's policy: the same random init for every worker of the job."""
    import torch

    _, LlamaForCausalLM = _llama_classes()  # noqa: N806
    torch.manual_seed(ctx.job_id * 7919 + ctx.seed)
    model = LlamaForCausalLM(llama_config(ctx.model))
    model.generation_config.pad_token_id = PAD
    return model


def _setup_torch() -> None:
    import torch

    torch.set_num_threads(torch_threads())


def _logprobs(model: Any, ids: Any, attention: Any) -> tuple[Any, Any]:
    """Return (log-probabilities of each next token, entropy per position), [B, T-1]."""
    import torch

    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
    logp_all = torch.log_softmax(logits / TEMPERATURE, dim=-1)
    taken = logp_all.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return taken, entropy


# --- residency: the state's host copy ---------------------------------------------------


class HostCopy:
    """The resident state of one worker in host memory: one contiguous buffer.

    `offload(tensors)` copies every tensor into the buffer (allocated once: pinned with
    CUDA, a shared-memory segment on the CPU, outside the process's private heap) and
    empties the tensors' storage; `reload(tensors, device)` gives each tensor fresh storage
    on the device and copies its values back. The tensors stay the same Python objects (the
    model's parameters, AdamW's moments keyed by them), so nothing else is rebuilt.
    """

    def __init__(self) -> None:
        self.buffer: Any = None
        self.layout: list[tuple[int, int, tuple[int, ...], Any]] = []  # offset, numel, shape, dtype
        self.resident = False

    def offload(self, tensors: list[Any]) -> int:
        import torch

        total = sum(t.numel() for t in tensors)
        if self.buffer is None or self.buffer.numel() != total:
            buf = torch.empty(total, dtype=torch.float32)
            self.buffer = buf.pin_memory() if torch.cuda.is_available() else buf.share_memory_()
        self.layout = []
        offset = 0
        with torch.no_grad():
            for t in tensors:
                n = t.numel()
                self.buffer[offset : offset + n].copy_(t.detach().reshape(-1).float())
                self.layout.append((offset, n, tuple(t.shape), t.dtype))
                t.data = torch.empty(0, dtype=t.dtype, device=t.device)
                offset += n
        self.resident = True
        return total * 4

    def reload(self, tensors: list[Any], device: Any) -> None:
        if not self.resident:
            return
        with torch_no_grad():
            for t, (offset, n, shape, dtype) in zip(tensors, self.layout, strict=True):
                t.data = (
                    self.buffer[offset : offset + n]
                    .to(device=device, dtype=dtype, copy=True, non_blocking=True)
                    .reshape(shape)
                )
        self.resident = False


def torch_no_grad() -> Any:
    import torch

    return torch.no_grad()


# --- checkpoints ------------------------------------------------------------------------

CHECKPOINT_FORMAT = "rollmux-hf-grpo/1"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be restored (corrupt, another format, another model)."""


def _pack(tensors: dict[str, Any], meta: dict[str, Any]) -> bytes:
    from safetensors.torch import save

    return bytes(
        save(
            {k: v.detach().contiguous().cpu() for k, v in tensors.items()},
            metadata={"format": CHECKPOINT_FORMAT, "meta": json.dumps(meta)},
        )
    )


def unpack(blob: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return (tensors, meta) of a checkpoint; raise CheckpointError saying what is wrong."""
    from safetensors.torch import load

    if not blob:
        raise CheckpointError("the checkpoint is empty (0 bytes)")
    try:
        tensors = load(blob)
        header = _safetensors_metadata(blob)
    except Exception as exc:
        raise CheckpointError(
            f"the checkpoint is corrupt: not a safetensors file ({type(exc).__name__}: {exc})"
        ) from exc
    if header.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"the checkpoint is not an hf-grpo checkpoint (format {header.get('format')!r})"
        )
    return tensors, json.loads(header.get("meta", "{}"))


def _safetensors_metadata(blob: bytes) -> dict[str, str]:
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8 : 8 + n])
    return dict(header.get("__metadata__") or {})


# --- the rollout side ---------------------------------------------------------------------


class HfGrpoRollout:
    """One rollout worker: generates and scores a group of responses per prompt."""

    requires_checkpoint = True  # a resumed job without its checkpoint fails (dispatch/pool.py)

    def __init__(self) -> None:
        self.ctx: WorkerContext | None = None
        self.model: Any = None
        self.device: Any = None
        self.host = HostCopy()
        self.version = 0
        self.generator: Any = None

    def setup(self, ctx: WorkerContext) -> None:
        import torch

        _setup_torch()
        self.ctx = ctx
        self.device = _device(ctx)
        self.model = build_model(ctx.job).to(self.device).eval()
        self.generator = torch.Generator(device="cpu")
        self._reseed(0)

    def _reseed(self, version: int) -> None:
        assert self.ctx is not None
        job = self.ctx.job
        self.generator.manual_seed(
            (job.job_id * 1009 + job.seed) * 7919 + self.ctx.rank * 131 + version
        )

    def _tensors(self) -> list[Any]:
        return list(self.model.parameters())

    def _prompts(self) -> int:
        assert self.ctx is not None
        return max(1, PROMPTS_PER_ROLLOUT // self.ctx.world_size)

    def rollout(self, iteration: int) -> tuple[dict[str, float], dict[str, Any]]:
        """Sample GROUP responses for each of this worker's prompts and score them."""
        import torch

        self.reload()
        t0 = time.perf_counter()
        n = self._prompts()
        ab = torch.randint(0, OPERANDS, (n, 2), generator=self.generator)
        prompts = torch.tensor(
            [[BOS, *encode(f"{a}+{b}=")] for a, b in ab.tolist()], dtype=torch.long
        ).repeat_interleave(GROUP, dim=0)
        ids = prompts.to(self.device)
        done = torch.zeros(ids.shape[0], dtype=torch.bool, device=self.device)
        with torch.no_grad():
            for _ in range(MAX_NEW_TOKENS):
                logits = self.model(input_ids=ids).logits[:, -1].float() / TEMPERATURE
                probs = torch.softmax(logits, dim=-1).cpu()
                nxt = torch.multinomial(probs, 1, generator=self.generator).squeeze(-1)
                nxt = torch.where(done.cpu(), torch.full_like(nxt, PAD), nxt).to(self.device)
                done = done | (nxt == EOS)
                ids = torch.cat([ids, nxt[:, None]], dim=1)
            attention = torch.ones_like(ids)
            old_logp, entropy = _logprobs(self.model, ids, attention)
        response = ids[:, PROMPT_LEN:].cpu()
        mask = _response_mask(response)
        rewards = torch.tensor(
            [
                reward(a, b, r)
                for (a, b), r in zip(
                    ab.repeat_interleave(GROUP, dim=0).tolist(), response.tolist(), strict=True
                )
            ]
        )
        old = old_logp[:, PROMPT_LEN - 1 :].cpu()
        ent = entropy[:, PROMPT_LEN - 1 :].cpu()
        tokens = float(mask.sum())
        elapsed = max(time.perf_counter() - t0, 1e-9)
        self.offload()
        metrics = {
            "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std()),
            "accuracy": float((rewards == 1.0).float().mean()),
            "entropy": float((ent * mask).sum() / max(tokens, 1.0)),
            "samples": float(rewards.numel()),
            "tokens_per_s": tokens / elapsed,
            "weights_version": float(self.version),
        }
        batch = {
            "iteration": iteration,
            "ids": ids.cpu().numpy(),
            "mask": mask.numpy(),
            "old_logp": old.numpy(),
            "rewards": rewards.numpy(),
        }
        return metrics, batch

    def receive_weights(self, weights: Any, version: int) -> dict[str, float]:
        """Load the trainers' weights (name -> array, every shard joined)."""
        import torch

        self.reload()
        with warnings.catch_warnings():  # (the object store's arrays are read-only: copied below)
            warnings.simplefilter("ignore", UserWarning)
            state = {k: torch.from_numpy(v) for k, v in weights.items()}
        missing = set(self.model.state_dict()) - set(state)
        if missing:
            raise RuntimeError(
                f"the synced weights lack {len(missing)} tensors, e.g. {sorted(missing)[0]}"
            )
        self.model.load_state_dict(state, strict=True)
        self.version = version
        self._reseed(version)
        self.offload()
        return {"weights_bytes": float(sum(v.nbytes for v in weights.values()))}

    def offload(self) -> None:
        if self.model is not None and not self.host.resident:
            self.host.offload(self._tensors())

    def reload(self) -> None:
        self.host.reload(self._tensors(), self.device)

    def restore(self, blob: bytes) -> None:
        """Take the policy weights of the trainer's checkpoint."""
        tensors, meta = unpack(blob)
        self.reload()
        state = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
        _load_model(self.model, state)
        self.version = int(meta.get("updates", 0))
        self._reseed(self.version)


def _response_mask(response: Any) -> Any:
    """Return 1.0 for the response tokens up to and including the first EOS."""
    eos = (response == EOS).int()
    return ((eos.cumsum(dim=1) - eos) == 0).float()  # (after the first EOS: padding)


def _load_model(model: Any, state: dict[str, Any]) -> None:
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    if missing:
        raise CheckpointError(
            f"the checkpoint lacks {len(missing)} model tensors (e.g. {missing[0]}): "
            "another model size?"
        )
    for k, v in state.items():
        if k in expected and tuple(expected[k].shape) != tuple(v.shape):
            raise CheckpointError(
                f"the checkpoint's {k} is {tuple(v.shape)}, the model's {tuple(expected[k].shape)}:"
                " another model size?"
            )
    model.load_state_dict(state, strict=False)


# --- the trainer side ---------------------------------------------------------------------


class HfGrpoTrainer:
    """One trainer: GRPO updates with AdamW on every rollout rank's batch."""

    requires_checkpoint = True

    def __init__(self) -> None:
        self.ctx: WorkerContext | None = None
        self.model: Any = None
        self.reference: Any = None
        self.optimizer: Any = None
        self.device: Any = None
        self.host = HostCopy()
        self.updates = 0

    def setup(self, ctx: WorkerContext) -> None:
        import torch

        _setup_torch()
        self.ctx = ctx
        self.device = _device(ctx)
        self.model = build_model(ctx.job).to(self.device).train()
        if KL_COEF > 0:
            self.reference = build_model(ctx.job).to(self.device).eval()
            for p in self.reference.parameters():
                p.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=LEARNING_RATE)
        torch.manual_seed(ctx.job.job_id * 31 + ctx.rank)

    def _tensors(self) -> list[Any]:
        """Every tensor of the resident state: parameters, then AdamW's moments."""
        out = list(self.model.parameters())
        for p in self.model.parameters():
            st = self.optimizer.state.get(p)
            if st:
                out += [st["exp_avg"], st["exp_avg_sq"]]
        if self.reference is not None:
            out += list(self.reference.parameters())
        return out

    def train(self, iteration: int, batches: list[Any]) -> dict[str, float]:
        """Take EPOCHS GRPO steps on this iteration's batches (one per rollout rank)."""
        import torch

        got = [b for b in batches if b is not None]
        if not got or any(int(b["iteration"]) != iteration for b in got):
            raise RuntimeError(f"training {iteration} without this iteration's rollout batches")
        self.reload()
        t0 = time.perf_counter()
        ids = torch.from_numpy(_cat([b["ids"] for b in got])).to(self.device)
        mask = torch.from_numpy(_cat([b["mask"] for b in got])).to(self.device)
        old = torch.from_numpy(_cat([b["old_logp"] for b in got])).to(self.device)
        rewards = torch.from_numpy(_cat([b["rewards"] for b in got])).to(self.device)
        grouped = rewards.view(-1, GROUP)
        adv = (grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)
        adv = adv.reshape(-1, 1)
        attention = torch.ones_like(ids)
        tokens = mask.sum().clamp(min=1.0)
        stats: dict[str, float] = {}
        for _ in range(EPOCHS):
            logp, entropy = _logprobs(self.model, ids, attention)
            logp, entropy = logp[:, PROMPT_LEN - 1 :], entropy[:, PROMPT_LEN - 1 :]
            ratio = torch.exp(logp - old)
            clipped = torch.clamp(ratio, 1 - CLIP, 1 + CLIP)
            surrogate = torch.minimum(ratio * adv, clipped * adv)
            loss = -(surrogate * mask).sum() / tokens
            kl = torch.zeros((), device=self.device)
            if self.reference is not None:
                with torch.no_grad():
                    ref, _ = _logprobs(self.reference, ids, attention)
                ref = ref[:, PROMPT_LEN - 1 :]
                kl = ((torch.exp(ref - logp) - (ref - logp) - 1) * mask).sum() / tokens
                loss = loss + KL_COEF * kl
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            stats = {
                "loss": float(loss.detach()),
                "kl": float(kl.detach())
                if self.reference is not None
                else float(((old - logp.detach()) * mask).sum() / tokens),
                "entropy": float((entropy.detach() * mask).sum() / tokens),
                "clip_fraction": float((((ratio - 1).abs() > CLIP).float() * mask).sum() / tokens),
            }
        self.model.zero_grad(set_to_none=True)  # (gradients are not resident state)
        self.updates += 1
        elapsed = max(time.perf_counter() - t0, 1e-9)
        self.offload()
        return {
            **stats,
            "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std()),
            "samples": float(rewards.numel()),
            "tokens_per_s": float(tokens) * EPOCHS / elapsed,
            "updates": float(self.updates),
        }

    def send_weights(self) -> dict[str, Any]:
        """Return the policy's weights: name -> a numpy view of each tensor (no copy)."""
        self.reload()
        return {k: v.detach().cpu().numpy() for k, v in self.model.state_dict().items()}

    def offload(self) -> None:
        if self.model is not None and not self.host.resident:
            self.host.offload(self._tensors())

    def reload(self) -> None:
        self.host.reload(self._tensors(), self.device)

    def checkpoint(self) -> bytes:
        """Return the model, AdamW's state, the update count and the RNG, as safetensors."""
        import torch

        self.reload()
        tensors = {f"model.{k}": v for k, v in self.model.state_dict().items()}
        names = dict(self.model.named_parameters())
        index = {id(p): k for k, p in names.items()}
        steps: dict[str, float] = {}
        for p, st in self.optimizer.state.items():
            name = index[id(p)]
            tensors[f"adam.{name}.exp_avg"] = st["exp_avg"]
            tensors[f"adam.{name}.exp_avg_sq"] = st["exp_avg_sq"]
            steps[name] = float(st["step"])
        tensors["rng.torch"] = torch.get_rng_state()
        assert self.ctx is not None
        shape = asdict(llama_shape(self.ctx.job.model))
        meta = {"updates": self.updates, "adam_steps": steps, "shape": shape}
        return _pack(tensors, meta)

    def restore(self, blob: bytes) -> None:
        """Continue where the checkpoint stopped: weights, AdamW's moments and steps, the
        update count and the RNG; raise CheckpointError when it cannot."""
        import torch

        tensors, meta = unpack(blob)
        self.reload()
        state = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
        _load_model(self.model, state)
        names = dict(self.model.named_parameters())
        for name, step in (meta.get("adam_steps") or {}).items():
            p = names.get(name)
            if p is None or f"adam.{name}.exp_avg" not in tensors:
                raise CheckpointError(
                    f"the checkpoint's AdamW state names {name!r}, not in the model"
                )
            self.optimizer.state[p] = {
                "step": torch.tensor(float(step)),
                "exp_avg": tensors[f"adam.{name}.exp_avg"].to(self.device),
                "exp_avg_sq": tensors[f"adam.{name}.exp_avg_sq"].to(self.device),
            }
        if "rng.torch" in tensors:
            torch.set_rng_state(tensors["rng.torch"])
        self.updates = int(meta.get("updates", 0))


def _cat(arrays: list[Any]) -> Any:
    import numpy as np

    return np.concatenate(arrays, axis=0)


class HfGrpoRunner:
    """`hf-grpo` as one object (the in-process dispatcher): one rollout side and one
    trainer side in this process, the weights handed over after every training."""

    requires_checkpoint = True

    def __init__(self) -> None:
        self.rollout_worker = HfGrpoRollout()
        self.trainer = HfGrpoTrainer()
        self.batch: Any = None

    def setup(self, ctx: RunnerContext) -> None:
        for role, side in (("rollout", self.rollout_worker), ("train", self.trainer)):
            side.setup(WorkerContext(job=ctx, role=role, rank=0, world_size=1, node=""))
        self.offload()

    def rollout(self, iteration: int) -> dict[str, float]:
        metrics, self.batch = self.rollout_worker.rollout(iteration)
        return metrics

    def train(self, iteration: int) -> dict[str, float]:
        metrics = self.trainer.train(iteration, [self.batch])
        self.batch = None
        metrics.update(
            self.rollout_worker.receive_weights(self.trainer.send_weights(), self.trainer.updates)
        )
        self.trainer.offload()
        return metrics

    def offload(self) -> None:
        self.rollout_worker.offload()
        self.trainer.offload()

    def reload(self) -> None:
        self.rollout_worker.reload()
        self.trainer.reload()

    def checkpoint(self) -> bytes:
        blob = self.trainer.checkpoint()
        self.trainer.offload()
        return blob

    def restore(self, blob: bytes) -> None:
        self.trainer.restore(blob)
        self.rollout_worker.restore(blob)
        self.offload()


HfGrpoRunner.rollout_side = HfGrpoRollout  # type: ignore[attr-defined]
HfGrpoRunner.trainer_side = HfGrpoTrainer  # type: ignore[attr-defined]
