"""`count-window` in Python: each key's events in groups of `size`.

The twin of the Rust plugins/count-window, with the same config, output and
state (list state `group`): a key's event values are appended to a list
until the `size`-th arrives; then the group is emitted as
`(key, "V1 V2 … Vsize")`, in arrival order, and the list emptied.
"""

from weir_sdk import ConfigError, ListState, Operator, export


class CountWindow(Operator):
    config_keys = ("size",)

    def init(self, config):
        self.size = config.get_int("size", 3)
        if self.size < 1:
            raise ConfigError("`size` must be at least 1: it is how many events of a key make a group")
        self.group = ListState("group")

    def process(self, ctx, event):
        self.group.add(ctx, event.value_str())
        if self.group.len(ctx) == self.size:
            ctx.emit(event.key, " ".join(self.group.get(ctx)))
            self.group.clear(ctx)


export(CountWindow)
