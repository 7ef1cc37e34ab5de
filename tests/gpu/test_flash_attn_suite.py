"""The flash-attn GPU suite, collected with this repository's tests (`pytest -m gpu`).

The suite lives in the faforge package (scripts/faforge/gpu/suite) so that `faforge test-gpu`
and a conda recipe's test section run the very same files; this module only brings its tests
into the repository's pytest run. Without a usable GPU every one is skipped with the reason.
"""

from faforge.gpu.suite import gate_marks
from faforge.gpu.suite.test_attention import *  # noqa: F403 (the suite's tests, collected here)
from faforge.gpu.suite.test_declaration import *  # noqa: F403 (as above)
from faforge.gpu.suite.test_dropout import *  # noqa: F403 (as above)
from faforge.gpu.suite.test_kvcache import *  # noqa: F403 (as above)

# Each module's `pytestmark` comes along with `*` and the last one imported would win; this module's is the
# gate's (test_declaration's alone lacks the skip the numerics tests need), whatever the import order.
pytestmark = gate_marks()
