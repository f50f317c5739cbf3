"""The custom multi-layer neighbour sampler of DGL's tutorials, as a gnnbridge sampler."""

import dgl


class MultiLayerSampler(dgl.dataloading.BlockSampler):
    """``fanouts[i]`` neighbours per node at hop i+1 from the seeds (gnnbridge's order)."""

    def __init__(self, fanouts):
        super().__init__()
        self.fanouts = list(fanouts)

    def sample_blocks(self, g, seed_nodes, exclude_eids=None):
        output_nodes, blocks = seed_nodes, []
        for fanout in self.fanouts:  # from the seeds outwards; blocks end up input layer first
            frontier = dgl.sampling.sample_neighbors(g, seed_nodes, fanout)
            block = dgl.to_block(frontier, seed_nodes)
            seed_nodes = block.srcdata[dgl.NID]
            blocks.insert(0, block)
        return seed_nodes, output_nodes, blocks
