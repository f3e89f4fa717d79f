"""Conversational prompts for the dataset task (TRL's "conversational" format).

A prompt cell is either a string or a list of ``{role, content}`` messages. The ``Problem`` keeps a
display text in ``prompt`` (the string, or the last user turn's content: what verifiers, hints,
splits and logs read) and, when the model must see a conversation, the messages in
``meta["messages"]`` with ``meta["chat_template_kwargs"]`` (e.g. ``{enable_thinking: false}``);
``rlvr.models.render_prompt`` turns them into the prompt string, the same way for rollouts,
warm start and evaluation. A row whose prompt is a plain string and a task without
``system_prompt`` or ``chat_template_kwargs`` gets no messages (the one-user-turn rendering of
``format_prompt``, as before).
"""

from __future__ import annotations

import json
from typing import Any

ROLES = ("system", "developer", "user", "assistant", "tool")  # what chat templates render


def prompt_fields(value: Any, *, system_prompt: str, template_kwargs: dict[str, Any],
                  where: str) -> tuple[str, str, dict[str, Any]]:
    """(display text, identity text for the uid hash, meta entries) of one prompt cell.
    ``system_prompt`` is prepended as a system message unless the conversation starts with one."""
    if isinstance(value, str):
        display, identity = value, value
        messages = [{"role": "user", "content": value}] if system_prompt or template_kwargs else None
    elif isinstance(value, (list, tuple)):
        messages = check_messages(value, where)
        display = next((m["content"] for m in reversed(messages) if m["role"] == "user"), messages[-1]["content"])
        identity = json.dumps(messages, sort_keys=True, ensure_ascii=False)
    else:
        raise ValueError(f"{where}: the prompt is a {type(value).__name__}; expected a string or a list of "
                         f"{{role, content}} messages")
    if messages is None:
        return display, identity, {}
    if system_prompt and messages[0]["role"] != "system":
        messages = [{"role": "system", "content": system_prompt}, *messages]
    meta: dict[str, Any] = {"messages": messages}
    if template_kwargs:
        meta["chat_template_kwargs"] = dict(template_kwargs)
    return display, identity, meta


def check_messages(value: Any, where: str) -> list[dict[str, Any]]:
    """The messages of a conversational cell, each a dict with string ``role`` (one of ``ROLES``) and
    ``content`` (keys a columnar format filled with None for other rows are dropped)."""
    if not value:
        raise ValueError(f"{where}: the conversation is empty")
    out = []
    for k, message in enumerate(value):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) \
                or not isinstance(message.get("content"), str):
            raise ValueError(f"{where}: message {k} is {message!r}; expected {{role: str, content: str}}")
        if message["role"] not in ROLES:
            raise ValueError(f"{where}: message {k} has role {message['role']!r:.40}; roles: {', '.join(ROLES)}")
        out.append({key: v for key, v in message.items() if v is not None})
    return out
