#!/usr/bin/env python3
"""Generates the scripted-provider script for the N-turn benchmark.

Every tool turn is one assistant message with three tool calls, run in order:
read `counter.txt`, edit `value {i}` -> `value {i+1}`, and run a cheap bash
command. A final text-only turn ends the run. Each tool turn after the first
checks (via `expect`) that the previous turn's three results came back and
that the edit applied, so a broken run fails loudly instead of running fast.

Usage: gen-100-turn-script.py [--turns N] [OUT]   (OUT defaults to stdout)
The workspace must hold `counter.txt` containing "value 0\n".
"""

import argparse
import json
import sys


def tool_turn(i: int) -> dict:
    """The assistant message of tool turn i (0-based)."""
    turn = {
        "content": [
            {"type": "tool_call", "name": "read", "arguments": {"path": "counter.txt"}},
            {
                "type": "tool_call",
                "name": "edit",
                "arguments": {
                    "path": "counter.txt",
                    "edits": [{"old_text": f"value {i}\n", "new_text": f"value {i + 1}\n"}],
                },
            },
            {"type": "tool_call", "name": "bash", "arguments": {"command": "grep -c value counter.txt"}},
        ]
    }
    if i > 0:
        turn["expect"] = {"tool_results": 3, "tool_result_contains": "Applied 1 edit"}
    return turn


def script(turns: int) -> dict:
    """The whole script: `turns` tool turns and one final text turn."""
    final = {
        "expect": {"tool_results": 3, "tool_result_contains": "Applied 1 edit"},
        "content": [{"type": "text", "text": f"Counted to {turns}."}],
    }
    return {"turns": [tool_turn(i) for i in range(turns)] + [final]}


def main() -> None:
    """Parses arguments and writes the script."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("out", nargs="?")
    args = parser.parse_args()
    text = json.dumps(script(args.turns), indent=1) + "\n"
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
