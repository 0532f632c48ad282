"""`word-count` in Python: counts events per key.

Same behaviour and same state as the Rust plugins/word-count: keyed by word
(`key_by = true` in the job file), it keeps one value state `count` per key
(a JSON number) and emits `(key, count so far)` for every event, the count
as decimal text, so the last output for a key is its total. Takes no config.
"""

from weir_sdk import Operator, ValueState, export


class WordCount(Operator):
    def init(self, config):
        self.count = ValueState("count", validate=lambda n: type(n) is int and n >= 0)

    def process(self, ctx, event):
        n = self.count.get(ctx, 0) + 1
        self.count.set(ctx, n)
        ctx.emit(event.key, str(n).encode())


export(WordCount)
