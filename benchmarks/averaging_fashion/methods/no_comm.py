"""The ceiling: the same ranks training with no communication at all. Its population steps
per second is the ceiling the averaging methods are measured against (issue 34); its rank-0
model is one rank trained on a quarter (1/N) of the data, its rank-average model the mean of N
independently trained models."""


class NoComm:
    def wrap(self, run, model):
        return model

    def after_step(self, run, step):
        pass

    def finish(self, run):
        pass


def make(run):
    return NoComm()
