"""Literal content of the test Hub's dataset repositories (a test double, never imported by roles).

SHAREGPT_MINI is a small real ShareGPT-format conversation list (the shape benchmark clients read: a JSON list of
{"id", "conversations": [{"from": "human"|"gpt", "value"}, ...]}): plain English, code and arithmetic questions with
correct answers, so a benchmark fed from it sends sensible prompts of varied lengths. The bytes are fixed (sorted
keys, 2-space indent, trailing newline), so their sha256 is stable across runs and seeds.
"""
from __future__ import annotations

import json

SHAREGPT_MINI_FILE = "sharegpt_mini.json"


def _c(cid: str, *turns: str) -> dict:
    roles = ("human", "gpt")
    return {"id": cid, "conversations": [{"from": roles[i % 2], "value": t} for i, t in enumerate(turns)]}


SHAREGPT_MINI: list[dict] = [
    _c("mini-0001",
       "What is the capital of Australia?",
       "The capital of Australia is Canberra. Many people guess Sydney or Melbourne, but Canberra was chosen as a "
       "compromise between those two cities and has been the seat of government since 1927."),
    _c("mini-0002",
       "Write a Python function that returns the n-th Fibonacci number.",
       "Here is an iterative version that runs in linear time and constant memory:\n\n```python\n"
       "def fib(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number, with fib(0) == 0 and fib(1) == 1.\"\"\"\n"
       "    if n < 0:\n        raise ValueError(\"n must be non-negative\")\n    a, b = 0, 1\n"
       "    for _ in range(n):\n        a, b = b, a + b\n    return a\n```\n\n"
       "For example, fib(10) returns 55."),
    _c("mini-0003",
       "What is 17 multiplied by 23?",
       "17 x 23 = 391. One way to check: 17 x 20 = 340 and 17 x 3 = 51, and 340 + 51 = 391."),
    _c("mini-0004",
       "Can you explain what a hash table is in simple terms?",
       "A hash table stores values under keys so that you can find them quickly. It runs each key through a hash "
       "function, which turns the key into a number, and uses that number to pick a slot in an array. Looking up "
       "a key repeats the same calculation and goes straight to the slot, so on average a lookup takes the same "
       "short time no matter how many items are stored. When two keys land in the same slot (a collision), the "
       "table keeps both, for example in a small list, and compares the keys to find the right one."),
    _c("mini-0005",
       "Solve for x: 3x + 7 = 22.",
       "Subtract 7 from both sides: 3x = 15. Divide both sides by 3: x = 5. Check: 3 x 5 + 7 = 22.",
       "And what if it were 3x + 7 = 23?",
       "Then 3x = 16, so x = 16/3, which is about 5.333."),
    _c("mini-0006",
       "Give me three tips for writing a clear email to a busy colleague.",
       "1. Put the request or the main point in the first sentence, so they know at once what you need.\n"
       "2. Keep it short and use a separate paragraph or a bullet for each question.\n"
       "3. Say when you need an answer and what happens if you do not get one, so they can plan around it."),
    _c("mini-0007",
       "How do I reverse a list in place in Python?",
       "Call the list's reverse method: `items.reverse()`. It changes the list itself and returns None. If you "
       "want a new reversed list and keep the original, use `items[::-1]` or `list(reversed(items))`."),
    _c("mini-0008",
       "What is the derivative of x^3 - 4x + 1?",
       "Differentiate term by term: the derivative of x^3 is 3x^2, the derivative of -4x is -4, and a constant "
       "has derivative 0. So the result is 3x^2 - 4."),
    _c("mini-0009",
       "Why is the sky blue?",
       "Sunlight contains all colours. When it passes through the air, the small gas molecules scatter short "
       "wavelengths (blue and violet) much more strongly than long ones (red and orange); this is called Rayleigh "
       "scattering. The scattered blue light reaches your eyes from every direction of the sky, so the sky looks "
       "blue. We see less violet because sunlight has less of it and our eyes are less sensitive to it."),
    _c("mini-0010",
       "Write a SQL query that counts the orders per customer in a table named orders with a column customer_id.",
       "```sql\nSELECT customer_id, COUNT(*) AS order_count\nFROM orders\nGROUP BY customer_id\n"
       "ORDER BY order_count DESC;\n```\n\nThe GROUP BY makes one row per customer, COUNT(*) counts the rows in "
       "each group, and the ORDER BY lists the busiest customers first."),
    _c("mini-0011",
       "If a train travels 180 kilometres in 2 hours and 15 minutes, what is its average speed?",
       "2 hours and 15 minutes is 2.25 hours. Average speed = distance / time = 180 / 2.25 = 80 kilometres per "
       "hour."),
    _c("mini-0012",
       "Translate 'Where is the train station?' into French and Spanish.",
       "French: \"Où est la gare ?\"\nSpanish: \"¿Dónde está la estación de tren?\""),
    _c("mini-0013",
       "What does the Unix command `grep -rn TODO src/` do?",
       "It searches every file under the src/ directory, recursively (-r), for lines that contain the text TODO, "
       "and prints each match with its file name and line number (-n)."),
    _c("mini-0014",
       "Is 221 a prime number?",
       "No. 221 = 13 x 17, so it has divisors other than 1 and itself. A quick way to find this is to try the "
       "primes up to the square root of 221, which is about 14.9: 2, 3, 5, 7 and 11 do not divide it, but 13 "
       "does."),
    _c("mini-0015",
       "Summarise the water cycle in two sentences.",
       "The sun heats water in oceans, lakes and plants so that it evaporates, and the vapour rises, cools and "
       "condenses into clouds. The water falls back as rain or snow, collects in rivers, lakes and the ground, and "
       "eventually returns to the sea, where the cycle starts again."),
    _c("mini-0016",
       "My JavaScript code prints 0.30000000000000004 for 0.1 + 0.2. Is that a bug?",
       "It is not a bug in your code. JavaScript numbers are binary floating point values, and 0.1 and 0.2 "
       "cannot be stored exactly in binary, so their sum is a tiny bit off. Round for display, for example "
       "`(0.1 + 0.2).toFixed(2)` gives \"0.30\", and compare with a tolerance such as "
       "`Math.abs(a - b) < Number.EPSILON` instead of `===`. For money, count in whole cents.",
       "Does Python have the same problem?",
       "Yes, Python floats are the same IEEE 754 doubles, so `0.1 + 0.2` prints 0.30000000000000004 there too. "
       "Python's `decimal.Decimal` or `fractions.Fraction` give exact results when you need them."),
    _c("mini-0017",
       "What is the sum of the integers from 1 to 100?",
       "5050. Pair the numbers from both ends: 1 + 100, 2 + 99, and so on give 50 pairs that each sum to 101, "
       "and 50 x 101 = 5050. In general the sum from 1 to n is n(n + 1)/2."),
    _c("mini-0018",
       "Write a short bash loop that prints the line count of every .txt file in the current directory.",
       "```bash\nfor f in *.txt; do\n    [ -e \"$f\" ] || continue\n    printf '%s %s\\n' \"$(wc -l < \"$f\")\" "
       "\"$f\"\ndone\n```\n\nThe `[ -e \"$f\" ]` check skips the literal pattern when no .txt file exists, and "
       "reading through `<` makes wc print only the number."),
    _c("mini-0019",
       "What is the difference between weather and climate?",
       "Weather is the state of the atmosphere at a given place and time: today's temperature, rain or wind. "
       "Climate is the pattern of weather over a long period, usually thirty years or more, such as the average "
       "temperature and rainfall of a region in each season."),
    _c("mini-0020",
       "A rectangle has a perimeter of 30 cm and its length is twice its width. What are its dimensions?",
       "Let the width be w, so the length is 2w. The perimeter is 2(w + 2w) = 6w = 30, so w = 5 cm and the length "
       "is 10 cm. Check: 2 x (5 + 10) = 30."),
    _c("mini-0021",
       "Explain recursion to a beginner, with a tiny example.",
       "A recursive function solves a problem by calling itself on a smaller version of the same problem, until "
       "it reaches a case small enough to answer directly (the base case). For example, the factorial of n is n "
       "times the factorial of n - 1, and the factorial of 0 is 1:\n\n```python\ndef factorial(n):\n"
       "    if n == 0:\n        return 1\n    return n * factorial(n - 1)\n```\n\n"
       "factorial(4) computes 4 x 3 x 2 x 1 x 1 = 24."),
]

SHAREGPT_MINI_README = """---
license: cc0-1.0
language:
- en
task_categories:
- text-generation
pretty_name: ShareGPT mini (test Hub)
configs:
- config_name: default
  data_files: sharegpt_mini.json
---

# sharegpt-mini

A tiny ShareGPT-format dataset served by the project's test Hub (lab/testhub): %d conversations of plain
English, code and arithmetic questions with their answers, in `sharegpt_mini.json`, a JSON list of
`{"id", "conversations": [{"from": "human" | "gpt", "value"}, ...]}`.
""" % len(SHAREGPT_MINI)


def sharegpt_mini_bytes() -> bytes:
    return (json.dumps(SHAREGPT_MINI, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def sharegpt_mini_readme_bytes() -> bytes:
    return SHAREGPT_MINI_README.encode("utf-8")
