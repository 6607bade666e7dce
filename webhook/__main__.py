"""`python -m mlgate_webhook serve|certs`: the same commands as `mlgate serve|certs`."""

import click

from .commands import admission_review, certs, serve
from .lifecycle import webhook


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """The mlgate admission webhook."""


main.add_command(serve)
main.add_command(certs)
main.add_command(admission_review)
main.add_command(webhook)

if __name__ == "__main__":
    main(prog_name="mlgate")
