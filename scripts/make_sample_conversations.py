"""Write data/sample_conversations.jsonl: the broken dataset in miniature (ShareGPT rows whose answers are empty).

60 multi-turn conversations (`conversations` of `from`/`value`): one to four user turns, a system message in a
third of them, every `gpt` answer empty or missing (the state of the dataset behind this project), and two rows
that regen must refuse (a tool turn, an image part). Deterministic: rerunning reproduces the committed file.

    python3 scripts/make_sample_conversations.py [--out data]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

TOPICS = ["a binary heap", "the French Revolution", "photosynthesis", "TCP congestion control", "compound interest"]
FOLLOW_UPS = [
    "Can you give a concrete example?",
    "What is a common mistake people make with it?",
    "Summarise that in two sentences.",
    "How would you explain it to a ten-year-old?",
    "What should I read next?",
]


def conversation(rng: random.Random, i: int) -> dict[str, Any]:
    turns: list[dict[str, str]] = []
    if i % 3 == 0:
        turns.append({"from": "system", "value": "You are a patient tutor. Keep answers short."})
    topic = rng.choice(TOPICS)
    questions = [f"Explain {topic} (question {i})."] + rng.sample(FOLLOW_UPS, rng.randint(0, 3))
    for q, question in enumerate(questions):
        turns.append({"from": "human", "value": question})
        if q < len(questions) - 1 or i % 4:  # every fourth conversation ends on the user's turn
            turns.append({"from": "gpt", "value": ""})
    return {"id": f"conv-{i:03d}", "conversations": turns, "source": ["forum", "support", "tutoring"][i % 3]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="data")
    rng = random.Random(14)
    rows = [conversation(rng, i) for i in range(60)]
    rows.append({"id": "tool-001", "messages": [{"role": "user", "content": "2+2?"}, {"role": "tool", "content": "4"}]})
    image = [{"type": "text", "text": "What is in this picture?"}, {"type": "image_url", "image_url": {"url": "x"}}]
    rows.append(
        {"id": "image-001", "messages": [{"role": "user", "content": image}, {"role": "assistant", "content": ""}]}
    )
    path = Path(ap.parse_args().out) / "sample_conversations.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    print(f"wrote {len(rows)} rows to {path}")


if __name__ == "__main__":
    main()
