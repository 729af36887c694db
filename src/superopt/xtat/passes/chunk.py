"""The batch-chunk pass: run the batch in k chunks (`superopt.rewrite.batchsplit`).

One site per graph, keyed by the batch (`batch:<n>`), so a choice survives any rewrite
before it: the options are 1 (the default: the batch whole) and the chunk counts
`chunk_options` offers, those that divide the batch and leave at least half of the
batch-dependent ops running per chunk. It decides `batch`, a kind of decision only the
real targets leave to the tuner (`superopt.xtat.targets`): what chunking gains there is
cache residency between ops on a CPU, which the simulated TPU, whose kernels are tiled
for its VMEM whatever the batch, does not model.

The pass comes after the rewrite pass and works on whatever graph the rewrites leave, so
a rewrite choice never sees chunked copies of its sites.
"""

from __future__ import annotations

from superopt.ir.graph import Graph
from superopt.ir.passes import compose
from superopt.rewrite.batchsplit import batch_of, chunk_options, describe, split_batch
from superopt.xtat.passes.base import PassResult, TunablePass
from superopt.xtat.space import PassConfig, Site
from superopt.xtat.stage import Candidate, Stage


class BatchChunks(TunablePass):
    name = "chunk"
    controls = "batch"

    def list_sites(self, stage: Stage) -> list[Site]:
        options = chunk_options(stage.graph)
        if not options:
            return []
        batch = batch_of(stage.graph)
        return [Site(f"batch:{batch}", (1, *options), 1, (),
                     f"batch {batch}: whole or in {', '.join(map(str, options))} chunks")]

    def describe(self, stage: Stage, site: Site, choice: object) -> str:
        return site.label if choice == 1 else f"batch {batch_of(stage.graph)} in {choice} chunks"

    def chunks(self, stage: Stage, config: PassConfig) -> int:
        """The configuration's chunk count on `stage` (1: the batch whole)."""
        self.check_config(stage, config)
        return next(iter(config.choices.values()), 1) if config.choices else 1

    def apply(self, stage: Stage, config: PassConfig) -> PassResult:
        k = self.chunks(stage, config)
        if k == 1:
            return PassResult(stage, None, {"chunks": 1})
        r = split_batch(stage.graph, k)
        to_source = r.origin if stage.to_source is None else compose(stage.to_source, r.origin)
        return PassResult(stage.evolve(graph=r.graph, to_source=to_source), r.origin,
                          {"chunks": k, "chunked_ops": r.chunked_ops,
                           "whole_ops": r.whole_ops, "summary": describe(r)})

    def chunked(self, graph: Graph, stage: Stage, config: PassConfig) -> Graph:
        """`graph` (the rewritten graph `stage` was folded from, what values are checked
        and runs are timed on) chunked as `config` says."""
        k = self.chunks(stage, config)
        return graph if k == 1 else split_batch(graph, k).graph


def chunk_count(candidate: Candidate) -> int:
    """The batch's chunk count in `candidate` (1: the batch whole, or no chunk pass)."""
    if BatchChunks.name not in candidate.names:
        return 1
    return next(iter(candidate.config(BatchChunks.name).choices.values()), 1)


__all__ = ["BatchChunks", "chunk_count"]
