"""dispatch_log.py -- log what PyTorch eager really does, at aten level.

Usage:
    from dispatch_log import Tracer
    tr = Tracer()
    tr.name(x, "x"); tr.name(W, "W")           # label pre-existing storages
    with tr:                                   # dispatch mode + saved-tensor hooks
        y = f(x, W)
        tr.mark("backward")
        tr.hook_graph(y)                       # optional: log autograd node start/end
        y.sum().backward()
    tr.dump()

Events (one global counter, so allocs / saves / frees / node runs are ordered):
    OP    aten op as seen at the Python dispatch key (i.e. *below* autograd and
          after CompositeImplicitAutograd decompositions).  Each output is
          NEW Sx (fresh storage, nbytes), ALIAS Sx (shares an input's storage)
          or SAME Sx (storage already known but not an input of this op).
    SAVE  autograd saved a tensor (saved_tensors_hooks pack hook).
    FREE  a storage's StorageImpl died (weakref.finalize on the preserved
          UntypedStorage PyObject -- fires exactly when the C++ refcount hits 0).
    NODE> / NODE<  autograd Node pre-hook / post-hook (only after hook_graph()).
    ACCG  AccumulateGrad finished for a leaf (post_accumulate_grad_hook).
    MARK  user marker.
Allocations done *inside* a kernel (workspace, at::empty inside a CPU kernel
that never re-enters the dispatcher above the mode) are not visible here.
"""
import re
import weakref
import itertools
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_DT = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16",
    torch.bfloat16: "bf16", torch.int64: "i64", torch.int32: "i32",
    torch.bool: "bool", torch.uint8: "u8", torch.int8: "i8",
}


def dts(dt):
    return _DT.get(dt, str(dt).replace("torch.", ""))


class Tracer(TorchDispatchMode):
    def __init__(self, show_strides_in=False, quiet_ops=(), save_hooks=True):
        super().__init__()
        self.save_hooks = save_hooks
        self.events = []
        self.counter = itertools.count(1)
        self.labels = {}          # storage data_ptr -> label
        self.sizes = {}           # label -> nbytes
        self.live = 0             # bytes of storages allocated inside the trace
        self.peak = 0
        self.n_new = itertools.count(1)
        self.n_ext = itertools.count(1)
        self.suppress = 0
        self.show_strides_in = show_strides_in
        self.quiet_ops = set(quiet_ops)
        self._hooks_ctx = None
        self._node_handles = []

    # ------------------------------------------------------------------ utils
    def _emit(self, kind, text):
        n = next(self.counter)
        self.events.append((n, kind, text))

    def mark(self, text):
        self._emit("MARK", f"---- {text} ----  (live traced bytes={self.live})")

    def _on_free(self, ptr, label, nbytes, tracked):
        if self.labels.get(ptr) == label:
            del self.labels[ptr]
        if tracked:
            self.live -= nbytes
        self._emit("FREE", f"{label} {nbytes}B  (live={self.live})")

    def _register(self, t, label, tracked):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        nbytes = st.nbytes()
        self.labels[ptr] = label
        self.sizes[label] = nbytes
        if tracked:
            self.live += nbytes
            self.peak = max(self.peak, self.live)
        weakref.finalize(st, self._on_free, ptr, label, nbytes, tracked)
        return label

    def name(self, t, label):
        """Give a pre-existing tensor's storage a readable label."""
        ptr = t.untyped_storage().data_ptr()
        if ptr in self.labels:
            old = self.labels[ptr]
            self.labels[ptr] = label
            return old
        return self._register(t, label, tracked=False)

    def slabel(self, t, create=True):
        try:
            st = t.untyped_storage()
        except Exception:
            return "?"
        ptr = st.data_ptr()
        if ptr == 0:
            return "EMPTY"
        if ptr in self.labels:
            return self.labels[ptr]
        if not create:
            return None
        return self._register(t, f"E{next(self.n_ext)}", tracked=False)

    def tdesc(self, t, strides=False):
        s = f"{dts(t.dtype)}{list(t.shape)}"
        if strides or not t.is_contiguous():
            s += f"st{list(t.stride())}"
            if t.storage_offset():
                s += f"+{t.storage_offset()}"
        return s

    # ----------------------------------------------------------- dispatch mode
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.suppress:
            return func(*args, **kwargs)
        flat_in, _ = tree_flatten((args, kwargs))
        in_t = [a for a in flat_in if isinstance(a, torch.Tensor)]
        in_desc = []
        in_ptrs = set()
        for a in in_t:
            lab = self.slabel(a)
            try:
                in_ptrs.add(a.untyped_storage().data_ptr())
            except Exception:
                pass
            in_desc.append(f"{self.tdesc(a, self.show_strides_in)}:{lab}")
        # scalars / non-tensor args, abbreviated
        other = [repr(a) for a in flat_in if not isinstance(a, torch.Tensor)
                 and a is not None and not isinstance(a, (torch.dtype, torch.device, torch.layout, torch.memory_format))]
        known_before = set(self.labels)
        out = func(*args, **kwargs)
        flat_out, _ = tree_flatten(out)
        out_desc = []
        for o in flat_out:
            if not isinstance(o, torch.Tensor):
                continue
            st = o.untyped_storage()
            ptr = st.data_ptr()
            d = self.tdesc(o, strides=True)
            if ptr == 0:
                out_desc.append(f"{d} EMPTY")
            elif ptr in in_ptrs:
                out_desc.append(f"{d} ALIAS {self.labels.get(ptr, '?')}")
            elif ptr in known_before:
                out_desc.append(f"{d} SAME {self.labels[ptr]}")
            elif ptr in self.labels:   # fresh, but a sibling output already registered it
                out_desc.append(f"{d} ALIAS-SIBLING {self.labels[ptr]}")
            else:
                lab = f"S{next(self.n_new)}"
                self._register(o, lab, tracked=True)
                out_desc.append(f"{d} NEW {lab} {st.nbytes()}B")
        name = str(func).replace("aten.", "").replace(".default", "")
        if name not in self.quiet_ops:
            oth = f" args={other}" if other else ""
            self._emit("OP", f"{name}({', '.join(in_desc)}){oth} -> [{'; '.join(out_desc)}]  (live={self.live})")
        return out

    # --------------------------------------------------------- saved tensors
    def _pack(self, t):
        self.suppress += 1
        try:
            lab = self.slabel(t)
            self._emit("SAVE", f"{self.tdesc(t)}:{lab} rg={t.requires_grad}")
            return t.detach()   # same storage, no grad_fn -> no ref cycle
        finally:
            self.suppress -= 1

    def _unpack(self, t):
        return t

    def __enter__(self):
        if self.save_hooks:
            self._hooks_ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
            self._hooks_ctx.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        r = super().__exit__(*exc)
        if self.save_hooks:
            self._hooks_ctx.__exit__(*exc)
        for h in self._node_handles:
            h.remove()
        self._node_handles = []
        return r

    # ----------------------------------------------------------- graph hooks
    def hook_graph(self, *roots, leaf_names=None):
        """Register pre/post hooks on every Node reachable from roots' grad_fn."""
        leaf_names = leaf_names or {}
        seen = set()
        stack = [r.grad_fn for r in roots if r.grad_fn is not None]
        while stack:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            nm = node.name()
            if hasattr(node, "variable"):
                v = node.variable
                nm = f"AccumulateGrad[{leaf_names.get(id(v), list(v.shape))}]"
                h = v.register_post_accumulate_grad_hook(
                    lambda p, nm=nm: self._emit(
                        "ACCG", f"{nm} .grad={self.tdesc(p.grad, True)}:{self.slabel(p.grad)}"))
                self._node_handles.append(h)

            def pre(gout, nm=nm):
                ds = [f"{self.tdesc(g)}:{self.slabel(g)}" if g is not None else "None" for g in gout]
                self._emit("NODE>", f"{nm} grad_out=[{', '.join(ds)}]")

            def post(gin, gout, nm=nm):
                ds = [f"{self.tdesc(g, True)}:{self.slabel(g)}" if g is not None else "None" for g in gin]
                self._emit("NODE<", f"{nm} grad_in=[{', '.join(ds)}]")
            self._node_handles.append(node.register_prehook(pre))
            self._node_handles.append(node.register_hook(post))
            for nxt, _ in node.next_functions:
                if nxt is not None:
                    stack.append(nxt)

    class _Quiet:
        def __init__(self, tr):
            self.tr = tr
        def __enter__(self):
            self.tr.suppress += 1
        def __exit__(self, *a):
            self.tr.suppress -= 1

    def quiet(self):
        """Context in which ops are executed but not logged / registered."""
        return Tracer._Quiet(self)

    # ------------------------------------------------------------------ output
    def summary(self, split="backward"):
        """Compact summary: SAVEs, NEW allocations before / after the first MARK containing split."""
        fwd_new, bwd_new, saves, frees_b = [], [], [], []
        by_node = {}
        cur_node = None
        in_bwd = False
        for n, k, t in self.events:
            if k == "NODE>":
                cur_node = t.split(" ")[0]
            if k == "NODE<":
                cur_node = None
            if k == "MARK" and split in t:
                in_bwd = True
                continue
            if k == "SAVE":
                saves.append(t)
            if k == "OP" and " NEW " in t:
                op = t.split("(")[0]
                news = re.findall(r"(\w+\[[^\]]*\](?:st\[[^\]]*\])?) NEW (S\d+) (\d+)B", t)
                for d, lab, nb in news:
                    item = f"{op}->{lab} {d.split('st')[0]} {nb}B"
                    (bwd_new if in_bwd else fwd_new).append(item)
                    if in_bwd:
                        by_node.setdefault(cur_node or "(outside node)", []).append(item)
            if k == "FREE" and in_bwd:
                frees_b.append(t.split("(")[0].strip())
        return dict(saves=saves, fwd_new=fwd_new, bwd_new=bwd_new, bwd_frees=frees_b, peak=self.peak,
                    bwd_new_by_node=by_node)

    def lines(self):
        return [f"#{n:<4} {k:<5} {t}" for n, k, t in self.events]

    def dump(self, file=None):
        txt = "\n".join(self.lines())
        if file:
            with open(file, "w") as f:
                f.write(txt + "\n")
        print(txt)
        return txt
