"""Judged turns for learner tests, built like the proxy logs them, with the real SmolLM2 tokenizer.

Prompt ids come from the model's chat template, response ids end with `<|im_end|>` as the engine
emits it, and behaviour logprobs are the real base model's log_softmax at each sampled token (what
the embedded engine logs). Rows and blobs go in through `core.blobs`; the proxy is not imported.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import torch
from sqlalchemy.orm import Session

from core.blobs import ids_rows, insert_blobs, json_row
from core.models import ChatSession, Label, Turn, TurnStatus
from core.tokens import pack_floats, pack_ids


@dataclass
class TurnMaker:
    tokenizer: Any
    model: Any  # the base model in fp32, eval mode

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def response_ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text + "<|im_end|>", add_special_tokens=False)["input_ids"])

    @torch.no_grad()
    def dist(self, prompt: list[int], response: list[int], model: Any | None = None) -> torch.Tensor:
        """Plain full-logits forward, independent of learner code: [n_response, vocab] logprobs."""
        ids = torch.tensor([prompt + response])
        logits = (model or self.model)(input_ids=ids).logits[0].float()
        return torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)

    def logprobs(self, prompt: list[int], response: list[int], model: Any | None = None) -> list[float]:
        """Each response token's logprob (what the embedded engine logs as the sampling logprob)."""
        logp = self.dist(prompt, response, model)
        return logp.gather(-1, torch.tensor(response)[:, None]).squeeze(-1).tolist()

    def add(
        self,
        session: Session,
        user: str,
        reply: str,
        *,
        score: int | None = None,
        hint: str | None = None,
        hint_source: str | None = None,  # default: judge, for a hinted turn
        status: str | None = None,
        served_by: int | None = None,
        messages: list[dict[str, Any]] | None = None,
        params: dict[str, Any] | None = None,
        cut: bool = False,
    ) -> Turn:
        """Insert one main turn (and its session) with exact tokens and logged logprobs; `cut`: the
        reply ran into its token budget (no `<|im_end|>`, finish_reason "length")."""
        messages = messages or [{"role": "user", "content": user}]
        prompt = self.prompt_ids(messages)
        response = self.response_ids(reply)[:-1] if cut else self.response_ids(reply)
        sid = f"s-{uuid.uuid4().hex[:8]}"
        session.add(ChatSession(id=sid, source="header"))
        insert_blobs(session, [json_row(m) for m in messages])
        chunks = ids_rows(prompt)
        insert_blobs(session, chunks)
        turn = Turn(
            session_id=sid, turn_index=0, request_id=uuid.uuid4().hex, model="learnproxy",
            adapter_version_id=served_by, message_refs=[json_row(m)["hash"] for m in messages],
            response_text=reply, finish_reason="length" if cut else "stop", params=params or {},
            prompt_token_refs=[c["hash"] for c in chunks], prompt_len=len(prompt),
            response_token_ids=pack_ids(response), n_response_tokens=len(response),
            response_logprobs=pack_floats(self.logprobs(prompt, response)),
            score=score, score_source="votes" if score is not None else None, hint=hint,
            hint_source=hint_source or ("judge" if hint else None),
            status=status or (TurnStatus.hinted if hint else TurnStatus.judged),
        )
        session.add(turn)
        session.flush()
        return turn

    def label(self, session: Session, turn: Turn, value: int, hint: str | None = None) -> Label:
        row = Label(turn_id=turn.id, value=value, hint=hint, author="tester")
        session.add(row)
        session.flush()
        return row
