"""Task-style openings for the user turns the target writes for distillation data (``specrepro.training.data``).

Free sampling from the chat template gives short, chatty user turns; the evaluation suites ask for
explanations, lists, word problems, summaries of long passages, code completion and follow-up turns. A
task-style conversation starts the user turn with one of these openings and lets the target write the
rest (at ``DistillConfig.task_temperature``), so the draft sees the kinds of answers it will be asked to predict.

Written for this project. None is taken from, or paraphrases, a prompt of the evaluation suites
(``specrepro/suites``, HumanEval): those stay held out. Openings are generic (a code opening such as
``"def "`` of course begins many code prompts); what follows them is the target's own text.
"""
from __future__ import annotations

# Instructions: the target finishes the request.
INSTRUCT = (
    "Explain how", "Explain why", "Explain in simple terms what", "Describe the main",
    "List five", "List seven", "Give me ten ideas for", "Give three reasons why",
    "Write a short email to", "Write a polite message asking", "Write a paragraph about",
    "Write a short story about", "Write a poem about", "Compare", "What is the difference between",
    "What are the advantages and disadvantages of", "How do I", "How can I", "Outline a plan to",
    "Suggest a weekly schedule for", "Define the term", "Summarize the main ideas of",
    "Rewrite this sentence to sound more formal:", "Make this text shorter and clearer:",
    "Give step-by-step instructions for", "Create a checklist for", "What should I consider when",
    "Argue for and against", "Classify the following items into groups:", "Translate into plain English:",
)

# Word problems: the target writes the problem; the answer works it out.
MATH = (
    "Solve this word problem step by step. A farmer", "Solve step by step: A shop", "A train leaves",
    "Tom has", "A recipe needs", "A class of", "Each box holds", "Lena saves", "A car travels",
    "Solve this problem: A rectangle", "A factory makes", "Three friends share", "A garden is",
    "Work it out step by step: A library", "If a pump fills", "A phone plan costs",
    "Calculate the total: A family buys", "A runner jogs", "What is the answer? A baker",
    "A school orders",
)

# Passages to summarise: the target first writes an article on request (its answer is also training data);
# the article then becomes a user turn, followed by a request for a summary.
ARTICLE_REQUEST = (
    "Write a short news article about", "Write a short report about", "Write a magazine article about",
    "Write an encyclopedia-style passage about", "Write a blog post about", "Write a press release about",
)
SUMMARY_REQUEST = (
    "Summarize the text above in three sentences.", "Give a short summary of this article.",
    "What are the key points of the passage above?", "Sum up this text in a few sentences.",
    "Condense the article above into one short paragraph.", "Briefly summarize the main points above.",
    "List the three most important facts in this text.",
)

# Code: the user turn is a code prefix (signature and docstring), as in code-completion prompts.
CODE = (
    "def ", "def count_", "def is_", "def find_", "def sum_", "def get_", "def sort_", "def reverse_",
    "from typing import List\n\n\ndef ", "from typing import List, Tuple\n\n\ndef ", "import math\n\n\ndef ",
    "def max_", "def filter_", "def parse_", "class ", "Write a Python function that",
    "Complete this Python function:\n\ndef ", "Fix the bug in this code:\n\ndef ",
)

# Second user turns of a multi-turn chat (after the target's first answer).
FOLLOW_UP = (
    "Thanks! Can you", "That helps. What about", "Could you make it", "Can you explain", "Why is that?",
    "Great. Now", "What if", "Can you give an example", "Shorter, please.", "OK, and how",
    "Interesting. Is it true that",
)

TASK_KINDS = ("instruct", "math", "summarize", "code", "chat")
OPENINGS = {"instruct": INSTRUCT, "math": MATH, "summarize": ARTICLE_REQUEST, "code": CODE, "chat": INSTRUCT}
