"""What a compilation produces: the stages' text, the metadata and the cubin. Light to import, so a disk-cache
hit never loads the compiler stages."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .core.errors import TiledslError

if TYPE_CHECKING:
    from .abi.signature import KernelSignature


class SassUnavailable(TiledslError, KeyError):
    """`ck.asm["sass"]` where no SASS can be had: the message says what is missing (the disassembler, or the
    cubin) and how to get it. A KeyError too, so `asm.get("sass")` and `except KeyError` keep working."""

    def __str__(self) -> str:                 # KeyError would show the message as a quoted repr
        return str(self.args[0]) if self.args else ""


class StageDict(dict):
    """The stages' outputs; "sass" is produced on first access (cuobjdump is a subprocess, not worth paying for
    on every compile). `"sass" in asm` is True exactly when it can be produced; `asm["sass"]` otherwise raises
    SassUnavailable saying why; `asm.get("sass")` is then None."""

    def __init__(self, stages, cubin):
        super().__init__(stages)
        self._cubin = cubin
        self._tried = False
        self._why = None

    def _sass(self):
        if not self._tried:
            self._tried = True
            from .lower import ptx as backend
            text, self._why = backend.sass(self._cubin)
            if text:
                dict.__setitem__(self, "sass", text)

    def __missing__(self, key):
        if key == "sass":
            self._sass()
            if "sass" in self.keys():
                return dict.__getitem__(self, "sass")
            raise SassUnavailable(f"asm['sass'] is not available: {self._why or 'the disassembler printed nothing'}")
        raise KeyError(key)

    def __contains__(self, key):
        if key == "sass":
            self._sass()
        return dict.__contains__(self, key)

    def get(self, key, default=None):
        return self[key] if key in self else default


class CompiledKernel:
    """A kernel compiled for one specialization and target.

    asm:       the stages' text: "tile" (the tile IR as written), "expanded" (after the pattern rules), "llvm",
               "ptx", and "sass" (disassembled on first access where cuobjdump or nvdisasm is installed; else
               asm["sass"] raises SassUnavailable, a KeyError, saying what is missing, and "sass" in asm is False)
    metadata:  registers, spill_stores/spill_loads, shared_bytes, dynamic_shared, compile_ms_to_ptx, assembler
    signature: the launch contract (abi.signature.KernelSignature): parameters, hidden slots, grid and block
    cubin:     the assembled binary, or None where neither nvJitLink nor ptxas is available (the driver JITs PTX)
    sm:        the target's SM number (`target`: the Target itself, when compiled in this process)
    """

    def __init__(self, name: str, sm: int, asm: dict, metadata: dict, signature: KernelSignature,
                 cubin: bytes | None = None):
        self.name = name
        self.sm = sm
        self.asm = asm
        self.metadata = metadata
        self.signature = signature          # the launch contract: parameters, hidden slots, grid and block
        self.cubin = cubin
        self.loaded = {}                    # device -> LoadedFunction
        self.expanded_ir = None             # kept for the interpreter when compiled in this process
        self.reexpand = None                # a disk-cache hit: makes expanded_ir again on demand (explain)

    def __repr__(self) -> str:
        return f"<CompiledKernel {self.name} sm_{self.sm} {self.metadata}>"

    def explain(self) -> str:
        """Each tile.apply with its source line, opcode, repeats and native instructions (tiledsl.tools.explain).
        A kernel served from the disk cache is expanded again for it (front end and patterns, no codegen)."""
        from .tools.explain import explain
        return explain(self)
