"""The flash-attn GPU suite, collected with this repository's tests (`pytest -m gpu`).

The suite lives in the faforge package (scripts/faforge/gpu/suite) so that `faforge test-gpu`
and a conda recipe's test section run the very same files; this module only brings its tests
into the repository's pytest run. Without a usable GPU every one is skipped with the reason.
"""

# test_declaration first: each module's `pytestmark` comes along with `*`, and the last one imported wins;
# the others carry the gate's skip, which the numerics tests need.
from faforge.gpu.suite.test_declaration import *  # noqa: F403
from faforge.gpu.suite.test_attention import *  # noqa: F403
from faforge.gpu.suite.test_dropout import *  # noqa: F403
from faforge.gpu.suite.test_kvcache import *  # noqa: F403
