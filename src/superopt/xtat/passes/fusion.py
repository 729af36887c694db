"""The fusion pass: per node of the laid-out graph, fuse into all consumers (True),
materialise (False), or, for a node with several consumers, "multi": compute it in the
first kernel that reads it (as the default partition forms kernels) and write its value
there as an extra output for the others (XLA's multi-output fusion; the int decision of
`tpu_sim.form_kernels`). The default is
the default compiler's priority fusion. Nodes whose value must be materialised (graph
outputs, no consumer) and views (bitcasts) have no site. Decisions the kernel former
cannot honour are repaired by it and reported; the stage keeps the decisions as honoured.

Applying a configuration on a stage that was partitioned before (the common case in a
search: a few decisions flip) re-forms only the kernels around the flipped nodes
(`tpu_sim.reform_kernels`); the result equals a full `form_kernels`, which tests check.
A configuration with a "multi" decision is partitioned in full.
"""

from __future__ import annotations

from superopt.tpu_sim import Simulator, form_kernels, is_source
from superopt.tpu_sim.incremental import reform_kernels
from superopt.xtat.passes.base import PassResult, TunablePass
from superopt.xtat.space import PassConfig, Site, digest
from superopt.xtat.stage import Stage

MULTI = "multi"


class FusionSites(TunablePass):
    name = "fusion"
    controls = "fusion"

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self._sig_keys: dict[object, str] = {}

    def default_decisions(self, stage: Stage) -> dict[int, bool]:
        got = stage.memo.get("fusion_default")
        if got is None:
            got = stage.memo["fusion_default"] = self.sim.fusion_default(stage.laid)
        return got

    def default_partition(self, stage: Stage) -> object:
        got = stage.memo.get("fusion_default_partition")
        if got is None:
            laid = stage.laid
            # Formed once with the decisions unless a kernel was split back.
            got = self.sim.default_fusion(laid)[1] or form_kernels(
                laid.graph, laid.laid_layouts, self.default_decisions(stage), laid.bitcasts,
                laid.consumers)
            stage.memo["fusion_default_partition"] = got
        return got

    def node_of(self, stage: Stage) -> dict[str, int]:
        self.sites(stage)  # lists the sites and their nodes once per stage
        return stage.memo["fusion_nodes"]

    def list_sites(self, stage: Stage) -> list[Site]:
        laid = stage.laid
        g = laid.graph
        hashes = g.node_hashes
        eff, needed = laid.consumers
        default = self.default_decisions(stage)
        out = []
        nodes: dict[str, int] = {}
        for n in g.nodes:
            i = n.id
            if is_source(n.op) or i in laid.bitcasts or needed[i] or not eff[i]:
                continue
            key = digest(hashes[i])
            nodes[key] = i
            options = (True, False, MULTI) if len(eff[i]) > 1 else (True, False)
            out.append(Site(key, options, bool(default.get(i, False)), stage.sources(i),
                            f"%{i} {n.op}"))
        stage.memo["fusion_nodes"] = nodes
        return out

    def apply(self, stage: Stage, config: PassConfig) -> PassResult:
        self.check_config(stage, config)
        laid = stage.laid
        nodes = self.node_of(stage)
        fusion: dict[int, bool | int] = dict(self.default_decisions(stage))
        eff = laid.consumers[0]
        multi = False
        for k, v in config.items():
            i = nodes[k]
            if v == MULTI:
                kernel_of = self.default_partition(stage).kernel_of
                fusion[i] = min(r for c in eff[i] for r in kernel_of[c])
                multi = True
            else:
                fusion[i] = bool(v)
        last = stage.memo.get("fusion_last")
        kc = self.sim.kernels
        if last is not None and not multi and not last[4]:
            old_config, old_fusion, old_part, old_sigs, _ = last
            changed = {nodes[k] for k in set(old_config.choices) ^ set(config.choices)}
            changed |= {nodes[k] for k in set(old_config.choices) & set(config.choices)
                        if old_config.choices[k] != config.choices[k]}
            part = reform_kernels(laid.graph, old_part, old_fusion, fusion, sorted(changed),
                                  laid.bitcasts, laid.consumers, bool_only=True)
            # Kernels reform_kernels did not touch are the very objects of the old
            # partition (both lists are sorted by root): their signatures are known.
            olds, (old_sig, old_key) = old_part.kernels, old_sigs
            sigs_l, keys_l = [], []
            j = 0
            for k in part.kernels:
                while j < len(olds) and olds[j].root < k.root:
                    j += 1
                if j < len(olds) and olds[j] is k:
                    sigs_l.append(old_sig[j])
                    keys_l.append(old_key[j])
                else:
                    sig = laid.signature(k, part.resolved, kc)
                    sigs_l.append(sig)
                    keys_l.append(self.sig_key(sig))
            sigs, keys = tuple(sigs_l), tuple(keys_l)
        else:
            part = form_kernels(laid.graph, laid.laid_layouts, fusion, laid.bitcasts,
                                laid.consumers)
            sigs = tuple(laid.signature(k, part.resolved, kc) for k in part.kernels)
            keys = tuple(self.sig_key(s) for s in sigs)
        stage.memo["fusion_last"] = (config, fusion, part, (sigs, keys), multi)
        if part.repaired:  # the decisions as honoured, so the stage is a valid config
            fusion = dict(fusion)
            for i, _ in part.repaired:
                fusion[i] = False
        report = {"kernels": len(part.kernels), "repaired": len(part.repaired)}
        return PassResult(stage.evolve(fusion=fusion, partition=part, signatures=sigs,
                                       sig_keys=keys), None, report)

    def sig_key(self, sig: object) -> str:
        """A stable digest of a kernel signature (Python's hash is salted per process)."""
        got = self._sig_keys.get(sig)
        if got is None:
            if len(self._sig_keys) > 1 << 20:
                self._sig_keys.clear()
            got = self._sig_keys[sig] = digest(repr(sig.key))  # type: ignore[attr-defined]
        return got


__all__ = ["FusionSites"]
