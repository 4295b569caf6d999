"""One settings object for every learnproxy process, read once from `LEARNPROXY_*` variables."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

DEFAULT_MODEL = "SmolLM2-135M-Instruct"


class Settings(BaseSettings):
    """Runtime settings. Build one with `get_settings()` (or directly in tests) and pass it in."""

    model_config = SettingsConfigDict(env_prefix="LEARNPROXY_", extra="forbid", validate_default=True)

    # --- storage -----------------------------------------------------------------------------
    data_dir: Path = Field(default=Path.home() / ".learnproxy", description="Models, adapters, DBs.")
    database_url: str | None = Field(default=None, description="SQLAlchemy URL; default SQLite in DATA_DIR.")

    # --- serving -----------------------------------------------------------------------------
    model: str = Field(default=DEFAULT_MODEL, description="Base model: the bundled default, an HF id or a path.")
    served_model_name: str = Field(default="learnproxy", description="Model name that follows the live adapter.")
    engine: Literal["embedded", "sglang", "null"] = "embedded"
    sglang_url: str = "http://127.0.0.1:30000"
    engine_timeout_s: float = Field(default=300.0, description="Longest wait for one engine call.")
    device: str = Field(default="auto", description="auto, cpu or cuda[:N] for the embedded engine and learner.")
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        default="auto", description="Embedded engine weights; auto: bf16 on CUDA and on CPUs with native bf16 "
        "(AMX, AVX512-BF16, Arm BF16), fp32 on other CPUs, where torch emulates bf16 many times slower.")
    max_batch_size: int = Field(default=8, ge=1, description="Sequences decoded together by the embedded engine.")
    torch_threads: int = Field(
        default=0, ge=0, description="CPU threads for torch in each learnproxy process; 0: share the CPU "
        "cores among the processes `serve --with-worker` starts (one process per core at least).")
    default_max_tokens: int = Field(default=512, ge=1)
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Comma-separated client keys; empty means open, loopback only."
    )
    admin_token: str | None = Field(default=None, description="Token for /review and the admin API.")
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)

    # --- sessions and logging ----------------------------------------------------------------
    session_idle_timeout_s: float = Field(default=1800.0, description="Idle time after which a session closes.")
    log_flush_interval_s: float = Field(default=0.2, description="Write-behind logger commit interval.")
    log_batch_size: int = Field(default=64, ge=1)

    # --- background work ---------------------------------------------------------------------
    broker_url: str | None = Field(default=None, description="Celery broker; default SQLite in DATA_DIR.")
    broker_poll_interval_s: float = Field(default=0.05, description="Polling interval of the SQLite broker.")
    enqueue: bool = Field(default=True, description="Send judge/train tasks to the broker.")

    # --- judge -------------------------------------------------------------------------------
    judge_url: str | None = Field(default=None, description="OpenAI-compatible base URL; default this proxy.")
    judge_model: str | None = Field(default=None, description="Judge model; default the base model.")
    judge_api_key: str | None = None
    judge_votes: int = Field(default=3, ge=1)
    judge_concurrency: int = Field(
        default=2, ge=1, description="Judge tasks at once in `serve --with-worker`: a turn the classifier "
        "decides at once need not wait behind one that waits for LLM votes, and votes of two turns batch.")
    judge_temperature: float = 0.6
    judge_seed: int | None = Field(
        default=None, description="Seed the judge's votes: each vote's `seed` is derived from this, the prompt "
        "and the vote's index, so judging the same turn again gives the same votes where the judge honours "
        "seeds (the embedded engine does; SGLang only with --enable-deterministic-inference). None: unseeded.")
    judge_max_tokens: int = 256
    judge_timeout_s: float = Field(
        default=120.0, gt=0, description="Longest wait for the judge's next token (the first included): a "
        "vote streams, so a slow judge that keeps writing is not cut off, a stalled one is.")
    judge_deadline_s: float = Field(
        default=270.0, gt=0, description="Longest a single vote may take in all; two rounds (votes, hints) "
        "stay inside the judge task's time limit.")
    judge_max_input_chars: int = 4000
    judge_signals: bool = Field(default=True, description="Deterministic tool-error signals stage.")
    judge_reaction: bool = Field(default=True, description="User-reaction classifier stage.")
    judge_llm_votes: bool = Field(default=True, description="LLM PRM votes stage.")
    hint_select: Literal["longest", "shortest"] = "longest"
    hint_min_chars: int = 10
    hint_from_correction: bool = Field(default=True, description="Use the user's correction as hint if none.")
    hint_drop_retry: bool = Field(
        default=True, description="Leave bare retry requests ('Try again.') out of a hint taken from the user's "
        "correction: they tell the teacher nothing and it answers them instead of the task.")
    hint_instructions_only: bool = Field(
        default=True, description="Of a correction that serves as the hint, leave out the complaint ('You "
        "buried the answer.') before the first sentence that says what to do ('Start with ...'): the "
        "teacher answers the complaint instead. A correction with no such sentence is kept whole.")
    hint_votes_on_correction: bool = Field(
        default=False, description="Ask the LLM for hints even when the reply is a confident correction "
        "(default: the correction itself is the hint, and no hint votes are spent).")

    # --- learner -----------------------------------------------------------------------------
    method: Literal["rl", "opd", "combined"] = "combined"
    train_batch_size: int = Field(
        default=8, ge=1, description="Samples per adapter version: small, so a version follows a few sessions.")
    auto_train: bool = Field(default=True, description="Queue a train step when a batch is ready.")
    auto_publish: bool = Field(default=True, description="Serve each new adapter version at once.")
    labels_override: bool = Field(default=True, description="Human labels replace judge scores in training.")
    keep_adapters: int = Field(default=3, ge=1, description="Loaded versions kept for rollback.")
    adapter_poll_interval_s: float = Field(default=0.5, description="How often the proxy checks the pointer.")

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: object) -> object:
        if isinstance(value, str):
            return [k.strip() for k in value.split(",") if k.strip()]
        return value

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'learnproxy.db'}"

    @property
    def broker(self) -> str:
        return self.broker_url or f"sqla+sqlite:///{self.data_dir / 'broker.db'}"

    @property
    def judge_base_url(self) -> str:
        return self.judge_url or f"http://{self.host}:{self.port}/v1"

    @property
    def judge_model_name(self) -> str:
        return self.judge_model or self.model

    @property
    def adapters_dir(self) -> Path:
        return self.data_dir / "adapters"

    @property
    def models_dir(self) -> Path:
        return self.data_dir / "models"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read from the environment once."""
    return Settings()
