# Stand-ins for vLLM's serving-only imports (web server, telemetry, grammars) that the KV cache
# planning code never calls, so vLLM's modules import on a CPU machine without them.
import importlib.abc, importlib.machinery, sys, types
from unittest import mock
FAKE = set(open(__file__.replace(".py", ".txt")).read().split())
REAL = {"vllm", "torch", "transformers", "numpy", "pydantic", "typing_extensions"}
class _Fake(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top not in FAKE:
            return None
        for f in sys.meta_path:
            if f is self:
                continue
            try:
                s = f.find_spec(name, path, target)
            except Exception:
                s = None
            if s is not None:
                return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        m = mock.MagicMock(name=spec.name)
        m.__path__ = []
        m.__spec__ = spec
        m.__name__ = spec.name
        return m
    def exec_module(self, module):
        pass
FAKED = _Fake()
sys.meta_path.append(FAKED)
