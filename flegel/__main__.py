"""``python -m flegel``: the command-line interface."""

from flegel.cli.commands import main

if __name__ == "__main__":
    raise SystemExit(main())
