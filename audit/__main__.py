"""`python -m mlgate_audit`: the same command as `mlgate audit`."""

from .command import audit

if __name__ == "__main__":
    audit(prog_name="mlgate audit")
