# The shared fixtures (tests/support/integrations_util.py).
from integrations_util import fuserun_training, spark  # noqa: F401
