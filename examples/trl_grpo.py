"""A real `trl.GRPOTrainer` as a RollMux `external` job: generation inside `phase("rollout")`,
the optimizer step inside `phase("train")`, each granted by the group controller.

Submit a job with `"runner": "external"` and as many `iterations` as the trainer takes
optimizer steps, then run this next to it (no GPU, no vLLM, nothing downloaded)::

    ROLLMUX_JOB_ID=42 ROLLMUX_REDIS_URL=redis://127.0.0.1:6379/0 HF_HUB_OFFLINE=1 \\
        python examples/trl_grpo.py --steps 50

The model is a tiny Llama built from a config with random weights, the tokenizer a
character-level one built in code, the task single-digit addition ("3+4=" -> "7") with a
verifiable reward. Everything TRL does is TRL's own; the subclass only decides where the
phases begin and end (docs/training-metrics.md, "A TRL GRPOTrainer through the phase API"):

- transformers' `Trainer` runs one optimizer step per batch (`training_step`: forward and
  backward, then `optimizer.step()` in its loop, then the `on_step_end` callback);
- GRPO generates inside `training_step`, in `_prepare_inputs` ->
  `_generate_and_score_completions`, once every `steps_per_generation x num_iterations`
  steps (1 x 1 here: one generation per optimizer step, GRPO's on-policy default);
- so the rollout phase wraps `_generate_and_score_completions`, and the train phase opens
  when it returns and closes at `on_step_end`, after the optimizer step (an exception in
  between reports the phase failed, with its message).

Each phase reports the training metrics RollMux stores per iteration (`grant.metrics`):
the rollout its reward_mean, reward_std, samples and tokens_per_s, the train phase its
loss, kl and entropy. The job page draws the reward curve from them.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import time
from typing import Any

# Offline by construction: nothing in this example is downloaded (set before the imports).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers  # noqa: E402
from transformers import (  # noqa: E402
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    TrainerCallback,
)
from transformers.trainer_callback import PrinterCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

import rollmux  # noqa: E402

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
CHARS = list("0123456789+=")


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Return a character-level tokenizer built in code (no download)."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()  # characters back to a string without spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        padding_side="left",
    )


def build_model(tokenizer: PreTrainedTokenizerFast, *, hidden: int = 32) -> LlamaForCausalLM:
    """Return a tiny Llama-style causal LM with random weights, built from a config."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def build_dataset(n: int = 64, seed: int = 0) -> Dataset:
    """Return `n` prompts "a+b=" with a + b < 10 (the answer is one digit)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a = rng.randint(0, 9)
        b = rng.randint(0, 9 - a)
        rows.append({"prompt": f"{a}+{b}=", "answer": str(a + b)})
    return Dataset.from_list(rows)


def addition_reward(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    """Score a completion 1 when it starts with the sum's digit (the verifiable reward)."""
    out = []
    for prompt, completion in zip(prompts, completions, strict=True):
        a, b = (int(x) for x in re.findall(r"\d", prompt)[:2])
        out.append(1.0 if completion.strip().startswith(str(a + b)) else 0.0)
    return out


class _TrainPhaseEnd(TrainerCallback):
    """Close the open train phase once the optimizer step is done (`on_step_end`)."""

    def __init__(self, trainer: PhasedGRPOTrainer) -> None:
        self.trainer = trainer

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.trainer._end_train_phase()
        return control


class PhasedGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose generation and optimizer step are RollMux phases."""

    def __init__(self, *args: Any, session: rollmux.PhaseSession, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.args.steps_per_generation != 1 or self.num_iterations != 1:
            # one generation per optimizer step: the phases alternate rollout, train
            raise ValueError("steps_per_generation and num_iterations must be 1 for phases")
        self.session = session
        self.verbose = False  # one line per iteration on stdout (main sets it)
        self.remove_callback(PrinterCallback)  # TRL's full log dict per step: too much here
        self._train_phase: Any = None
        self._rollout: dict[str, float] = {}
        self._train_grant: rollmux.Grant | None = None
        self._loss: float | None = None
        self.add_callback(_TrainPhaseEnd(self))

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        if not self.model.training:  # evaluation: not a phase of the job
            return super()._generate_and_score_completions(inputs)
        with self.session.phase("rollout") as grant:
            started = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            seconds = time.perf_counter() - started
            logged = self._metrics["train"]
            tokens = float(out["completion_mask"].sum().item())
            grant.metrics.update(
                reward_mean=float(logged["reward"][-1]),
                reward_std=float(logged["reward_std"][-1]),
                samples=float(out["completion_ids"].shape[0]),
                tokens_per_s=tokens / seconds if seconds > 0 else 0.0,
            )
            self._rollout = dict(grant.metrics)
        # the optimizer step's phase: open until `on_step_end` (after optimizer.step())
        self._train_phase = self.session.phase("train")
        self._train_grant = self._train_phase.__enter__()
        return out  # type: ignore[no-any-return]

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
        try:
            loss = super().training_step(model, inputs, num_items_in_batch)
        except BaseException as exc:
            if self._train_phase is not None:  # report the train phase failed, then raise
                phase, self._train_phase = self._train_phase, None
                phase.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self._loss = float(loss.item())
        return loss

    def _end_train_phase(self) -> None:
        if self._train_phase is None or self._train_grant is None:
            return
        logged = self._metrics["train"]
        metrics = {"loss": self._loss}
        for name in ("kl", "entropy"):
            if logged.get(name):
                metrics[name] = float(logged[name][-1])
        self._train_grant.metrics.update({k: v for k, v in metrics.items() if v is not None})
        phase, self._train_phase = self._train_phase, None
        phase.__exit__(None, None, None)
        if self.verbose:
            both = {**self._rollout, **self._train_grant.metrics}
            shown = ", ".join(f"{k} {v:.4g}" for k, v in both.items())
            print(f"iteration {self._train_grant.iteration}: {shown}", flush=True)


def make_trainer(
    session: rollmux.PhaseSession, *, steps: int, output_dir: str, seed: int = 0
) -> PhasedGRPOTrainer:
    """Return the phased GRPOTrainer for `steps` optimizer steps, all on the CPU."""
    torch.manual_seed(seed)
    tokenizer = build_tokenizer()
    # Saved to a local directory and passed by path: GRPO then loads its reference model
    # (the KL term's) from the same place. A local path, not a download.
    init_dir = os.path.join(output_dir, "init")
    build_model(tokenizer).save_pretrained(init_dir)
    tokenizer.save_pretrained(init_dir)
    config = GRPOConfig(
        output_dir=output_dir,
        max_steps=steps,
        per_device_train_batch_size=16,  # 4 prompts x 4 completions per step
        num_generations=4,
        steps_per_generation=1,
        max_completion_length=2,
        learning_rate=3e-3,
        beta=0.02,  # a KL term to a reference copy (reported as `kl`)
        temperature=1.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        fp16=False,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=seed,
    )
    return PhasedGRPOTrainer(
        model=init_dir,
        reward_funcs=addition_reward,
        args=config,
        train_dataset=build_dataset(seed=seed),
        processing_class=tokenizer,
        session=session,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job-id", type=int, default=int(os.environ.get("ROLLMUX_JOB_ID", 0)))
    parser.add_argument("--redis-url", default=os.environ.get("ROLLMUX_REDIS_URL", ""))
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps (= iterations)")
    parser.add_argument("--output-dir", default="/tmp/rollmux-trl-grpo")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait a grant")
    args = parser.parse_args()
    if not args.job_id:
        parser.error("--job-id (or ROLLMUX_JOB_ID): the RollMux job this trainer runs")
    torch.set_num_threads(1)
    session = rollmux.PhaseSession(
        args.job_id, redis_url=args.redis_url or None, timeout_s=args.timeout
    )
    trainer = make_trainer(session, steps=args.steps, output_dir=args.output_dir)
    trainer.verbose = True
    trainer.train()
    print(f"trained {trainer.state.global_step} steps")


if __name__ == "__main__":
    main()
