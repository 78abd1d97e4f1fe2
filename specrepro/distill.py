"""``python -m specrepro.distill``: the draft trainer's old command, kept because the zoo draft records it
(``models.ZOO["smollm2-135m-draft"].made_by``, its README and ``training_record.json``). The trainer is
``specrepro.training.draft``; its data, losses and evaluation are ``training.data``, ``training.losses`` and
``training.evaluate``."""
from __future__ import annotations

from .training.draft import main

if __name__ == "__main__":
    from .core.cli import run_main
    run_main(lambda: main(prog="python -m specrepro.distill"), "python -m specrepro.distill")
