class EncoderCudaGraphManager:
    """A multimodal encoder's graphs: one per token budget and encoder path."""

    def __init__(self, token_budgets, paths, forward):
        self.token_budgets = token_budgets
        self.paths = paths
        self.forward = forward

    def capture(self):
        for path in self.paths:
            for token_budget in sorted(self.token_budgets, reverse=True):
                self._capture_budget_graph(token_budget, path=path)

    def _capture_budget_graph(self, token_budget, path="default"):
        self.forward(token_budget // 64)
