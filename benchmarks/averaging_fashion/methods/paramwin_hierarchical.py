"""paramwin's hierarchical averaging (Heat DASO's hierarchy): the ranks form 2 groups
(``paramwin.AgentGroups`` with N/2 ranks per agent, as two nodes would), each group averages
its parameters synchronously after every optimizer step (an MPI_Allreduce over the group), and
the groups' leaders average with each other one-sidedly every max(1, H // 4) steps
(``paramwin.HierarchicalAveragingAgent``, topology ``all`` over the groups). A slow rank holds
up its own group, never the other. ``finish`` is the agent's closing mean over every rank."""

import paramwin


class Hierarchical:
    def __init__(self, run):
        if run.size % 2:
            raise ValueError("paramwin_hierarchical needs an even number of ranks (2 groups)")
        self.groups = None
        self.agent = None
        self.params = None
        self.interval = max(1, run.period // 4)

    def wrap(self, run, model):
        self.groups = paramwin.AgentGroups(run.comm, ranks_per_agent=run.size // 2)
        self.params = {n: p.data for n, p in model.named_parameters()}
        layout = paramwin.layout_of((n, t) for n, t in self.params.items())
        self.agent = paramwin.HierarchicalAveragingAgent(
            self.groups, layout, topology="all", interval=self.interval,
            name=f"averaging_fashion.{run.method}.{run.condition}")
        self.agent.publish(self.params)
        return model

    def after_step(self, run, step):
        r = self.agent.step(self.params)
        run.extra["group_seconds"] = run.extra.get("group_seconds", 0.0) + r.group_seconds
        run.extra["rounds_across"] = max(0, self.agent.rounds) if self.agent.leader else -1

    def finish(self, run):
        self.agent.finish(self.params)
        self.agent.close()
        self.groups.close()


def make(run):
    return Hierarchical(run)
