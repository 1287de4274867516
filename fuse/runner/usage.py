"""The launcher's usage error, in a module of its own: ``python -m fuse.runner.launch`` runs
launch.py as ``__main__`` while the elastic driver and the agents import it as
``fuse.runner.launch``, and a class defined in launch.py would then exist twice, so that main()
could not catch the one they raise."""


class UsageError(Exception):
    """A mistake on the command line; reported without a traceback, exit code 2."""
