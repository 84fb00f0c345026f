import pytest

from zoo_protocols.lenet import COMPRESSION_REGISTRY
from zoo_protocols.mnist import MNIST_REGISTRY
from zoo_protocols.registry import MethodRegistry
from zoo_protocols.uci import UCI_REGISTRY


def test_register_run_and_errors():
    registry = MethodRegistry("toy", "no_such_prefix_")

    @registry.register("double")
    def double(x):
        """Twice x."""
        return {"value": 2 * x}

    assert registry.get("double").description == "Twice x."
    result = registry.run_timed("double", 4, required=("value",))
    assert result["value"] == 8 and result["train_seconds"] >= 0
    with pytest.raises(RuntimeError, match="returned no 'error'"):
        registry.run_timed("double", 1, required=("error",))
    with pytest.raises(ValueError, match="unknown toy method 'triple'; available: double"):
        registry.get("triple")
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("double")(double)


@pytest.mark.parametrize("registry, expected", [(UCI_REGISTRY, {"bbb", "rdp", "iwae"}), (MNIST_REGISTRY, {"mfvi", "sparse-vd"}), (COMPRESSION_REGISTRY, {"rdp", "bc-gnj"})])
def test_protocol_registries_discover_their_modules(registry, expected):
    assert expected <= set(registry.available())
