"""Native tests of weir_sdk and the Python example plugins.

    python3 -m unittest discover -s guest-sdk/python/tests
"""

import importlib.util
import pathlib
import sys
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "guest-sdk" / "python"))

from weir_sdk import (  # noqa: E402
    Config,
    ConfigError,
    InputError,
    ListState,
    MapState,
    Operator,
    StateError,
    TimeDomain,
    Ttl,
    ValueState,
    codec,
)
from weir_sdk.testing import Harness  # noqa: E402
from weir_sdk import windows  # noqa: E402
from weir_sdk.windows import SUM, Windows  # noqa: E402


def load_plugin(name, cls):
    """Imports plugins/python/<name>/app.py natively and returns class ``cls``."""
    spec = importlib.util.spec_from_file_location(f"plugin_{name.replace('-', '_')}", ROOT / "plugins" / "python" / name / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, cls)


WordCount = load_plugin("word-count", "WordCount")
SensorWindow = load_plugin("sensor-window", "SensorWindow")
Cart = load_plugin("shopping-cart", "Cart")
CountWindow = load_plugin("count-window", "CountWindow")
Dedup = load_plugin("dedup", "Dedup")


def pairs(out):
    return [(e.key.decode(), e.value.decode()) for e in out]


class WordCountTest(unittest.TestCase):
    def test_counts_per_key_across_batches_as_json_numbers(self):
        h = Harness(WordCount)
        self.assertEqual(pairs(h.process([("a", "x"), ("b", "x"), ("a", "x")])), [("a", "1"), ("b", "1"), ("a", "2")])
        h.process([("a", "x")])
        self.assertEqual(h.raw_state("count", "a"), b"3")  # what the Rust ValueState<u64> stores
        self.assertEqual(h.state("count", "b"), 1)
        self.assertIsNone(h.state("count", "c"))
        self.assertEqual(h.value_fetches, 1, "a and b fetched in one call; a held from then on")
        self.assertEqual(h.values_fetched, 2)

    def test_reads_state_a_rust_version_wrote(self):
        h = Harness(WordCount)
        h.values["count"] = {b"a": b"41"}
        self.assertEqual(pairs(h.process([("a", "x")])), [("a", "42")])

    def test_keeps_timestamps(self):
        out = Harness(WordCount).process([("a", "x", 1000)])
        self.assertEqual(out[0].timestamp, 1000)

    def test_unkeyed_input_is_a_clear_error(self):
        with self.assertRaisesRegex(StateError, "key_by = true"):
            Harness(WordCount).process([("", "x")], keyed=False)

    def test_unknown_config_is_refused_but_host_keys_are_not(self):
        with self.assertRaisesRegex(ConfigError, "unknown key `colour`"):
            Harness(WordCount, {"colour": "red"})
        Harness(WordCount, {"weir.subtask": "0", "weir.parallelism": "1", "weir.attempt": "0"})

    def test_check_state(self):
        h = Harness(WordCount)
        h.check_state("count", [b"1", b"17"])
        with self.assertRaisesRegex(ValueError, r"stored value #1 \(\{\)"):
            h.check_state("count", [b"1", b"{"])
        with self.assertRaisesRegex(ValueError, "rejected"):
            h.check_state("count", [b"-1"])
        with self.assertRaisesRegex(ValueError, "declares no value state `total`"):
            h.check_state("total", [])
        with self.assertRaisesRegex(ValueError, "declares no map state `count`"):
            h.check_state("count", [], is_map=True)

    def test_a_failed_batch_writes_nothing(self):
        class Failing(Operator):
            def init(self, config):
                self.count = ValueState("count")

            def process(self, ctx, event):
                self.count.set(ctx, 1)
                ctx.register_timer(5)
                raise InputError("bad")

        h = Harness(Failing)
        with self.assertRaises(InputError):
            h.process([("a", "x")])
        self.assertIsNone(h.state("count", "a"))
        self.assertEqual(h.timers, set())


    def test_times_and_output_names_the_host_cannot_take_fail_where_given(self):
        class Emitting(Operator):
            config_keys = ("mode",)

            def init(self, config):
                self.mode = config.get("mode")

            def process(self, ctx, event):
                if self.mode == "whole-float":
                    ctx.emit(event.key, "v", timestamp=5.0)
                    ctx.register_timer(7.0)
                elif self.mode == "fraction":
                    ctx.emit(event.key, "v", timestamp=1.5)
                elif self.mode == "too-late":
                    ctx.emit(event.key, "v", timestamp=2**63)
                elif self.mode == "timer":
                    ctx.register_timer(1.5)
                elif self.mode == "output":
                    ctx.emit(event.key, "v", output=5)

        out = Harness(Emitting, config=[("mode", "whole-float")]).process([("a", "x")])
        self.assertEqual([e.timestamp for e in out], [5])
        for mode, message in [
            ("fraction", "an event's timestamp must be a whole number of ms within 64 bits, got 1.5"),
            ("too-late", "an event's timestamp must be a whole number of ms within 64 bits"),
            ("timer", "a timer's timestamp must be a whole number of ms within 64 bits, got 1.5"),
            ("output", "a side output's name must be a str, got 5"),
        ]:
            with self.assertRaisesRegex(TypeError, message):
                Harness(Emitting, config=[("mode", mode)]).process([("a", "x")])

    def test_the_base_class_called_by_the_bindings_says_export_was_forgotten(self):
        # componentize-py calls the app module's `Operator` with the host's
        # config (a list of pairs) when app.py never called export().
        with self.assertRaisesRegex(TypeError, r"call weir_sdk.export\(YourOperator\)"):
            Operator().init([("weir.state", "new")])


    def test_a_traceback_starts_at_the_plugins_own_frame(self):
        export = importlib.import_module("weir_sdk.export")  # the module, not the function it exports

        class Broken(Operator):
            def process(self, ctx, event):
                raise KeyError("missing")

        try:
            Harness(Broken).process([("a", "x")])
        except KeyError as e:
            error = e
        # From the SDK on, as the host's call into the plugin starts.
        from_the_host = error.__traceback__.tb_next
        self.assertIn("weir_sdk", from_the_host.tb_frame.f_code.co_filename)
        shown = export._from_the_plugin(from_the_host)
        self.assertEqual((shown.tb_frame.f_code.co_name, pathlib.Path(shown.tb_frame.f_code.co_filename).name), ("process", "test_sdk.py"))
        try:
            Config([("n", "x")]).get_int("n")
        except ConfigError as e:
            in_the_sdk = e.__traceback__.tb_next
        self.assertIs(export._from_the_plugin(in_the_sdk), in_the_sdk, "an error raised in the SDK keeps its frames")

    def test_the_host_keys_say_the_task_whether_restored_and_the_memory_limit(self):
        config = Config([("weir.subtask", "1"), ("weir.parallelism", "3"), ("weir.state", "empty"), ("weir.memory-limit-mb", "512"), ("n", "2")])
        self.assertEqual((config.task.subtask, config.task.parallelism), (1, 3))
        self.assertEqual((config.restored, config.memory_limit_mb, dict(config)), (False, 512, {"n": "2"}))
        # A host that does not say (an older one): restored, as in Rust;
        # parallelism 1, as the host never runs fewer.
        bare = Config([])
        self.assertEqual((bare.restored, bare.memory_limit_mb, bare.task.parallelism), (True, None, 1))

    def test_config_numbers_are_read_as_the_rust_sdk_reads_them(self):
        pairs = [("n", "+12"), ("x", "1e3"), ("sep", "1_000"), ("pad", " 12"), ("f", "1_0.5"), ("wide", "１２")]
        pairs += [("min", "-9223372036854775808"), ("over", "9223372036854775808"), ("inf", "inf"), ("nan", "NaN"), ("huge", "1e999")]
        config = Config(pairs)
        self.assertEqual((config.get_int("n"), config.get_float("x"), config.get_int("min")), (12, 1000.0, -(2**63)))
        bad = [("sep", config.get_int), ("pad", config.get_int), ("f", config.get_float), ("pad", config.get_float)]
        bad += [("over", config.get_int), ("inf", config.get_float), ("nan", config.get_float), ("huge", config.get_float)]
        for key, getter in bad + [("wide", config.get_int), ("wide", config.get_float)]:
            with self.assertRaisesRegex(ConfigError, f"`{key}` = .* is not a valid"):
                getter(key)

    def test_state_keeps_only_finite_numbers(self):
        class Keeping(Operator):
            def init(self, config):
                self.last = ValueState("last")

            def process(self, ctx, event):
                self.last.set(ctx, float(event.value.decode()))

        h = Harness(Keeping)
        h.process([("a", "1.5")])
        self.assertEqual(h.state("last", "a"), 1.5)
        with self.assertRaisesRegex(StateError, "cannot encode value state `last`: nan is not a finite number"):
            h.process([("a", "nan")])
        self.assertEqual(h.state("last", "a"), 1.5, "the failed batch wrote nothing")


class Holder(Operator):
    """Sets each key's value to what its event says (``value`` JSON)."""

    def init(self, config):
        self.v = ValueState("v")

    def process(self, ctx, event):
        old = self.v.get(ctx)
        self.v.set(ctx, event.value_json())
        ctx.emit(event.key, codec.dumps(old))


class HeldValueStateTest(unittest.TestCase):
    """Value state without a time-to-live is held in the instance between
    calls and written back by key when the host asks (``flush``)."""

    def test_counts_stay_in_the_instance_until_the_host_asks_for_them(self):
        h = Harness(WordCount, {"weir.state": "empty"})
        for _ in range(3):
            h.process([("a", "x"), ("b", "x"), ("a", "x")])
        self.assertEqual((h.value_fetches, h.keyed_writes), (0, 0), "a fresh instance reads nothing, writes nothing")
        self.assertEqual(h._values, {}, "the host has nothing before the flush")
        h.flush()
        self.assertEqual(h.keyed_writes, 2, "each changed key written once")
        self.assertEqual((h.raw_state("count", "a"), h.raw_state("count", "b")), (b"6", b"3"))
        h.flush()
        self.assertEqual(h.keyed_writes, 2, "nothing changed since")
        self.assertEqual(pairs(h.process([("a", "x")])), [("a", "7")])

    def test_many_values_are_written_back_in_several_host_calls(self):
        h = Harness(WordCount, {"weir.state": "empty"})
        keys = [f"k{i}" for i in range(20000)]
        for start in range(0, len(keys), 8192):
            h.process([(k, "x") for k in keys[start : start + 8192]])
        h.flush()
        self.assertEqual((h.keyed_writes, h.keyed_write_calls), (20000, 2), "at most 16 384 a call")
        self.assertEqual((h.state("count", "k0"), h.state("count", "k19999")), (1, 1))

    def test_a_restored_instance_fetches_each_key_once_in_one_call_per_batch(self):
        h = Harness(WordCount, {"weir.state": "restored"})
        h.values["count"] = {b"a": b"41", b"b": b"1"}
        self.assertEqual(pairs(h.process([("a", "x"), ("b", "x"), ("c", "x")])), [("a", "42"), ("b", "2"), ("c", "1")])
        self.assertEqual(pairs(h.process([("c", "x"), ("a", "x")])), [("c", "2"), ("a", "43")])
        self.assertEqual((h.value_fetches, h.values_fetched), (1, 3))

    def test_past_its_share_of_the_memory_limit_the_instance_writes_back_and_forgets(self):
        h = Harness(WordCount, {"weir.state": "empty", "weir.memory-limit-mb": "1"})
        keys = [f"k{i}" for i in range(3000)]
        for _ in range(3):
            for start in range(0, len(keys), 500):
                h.process([(k, "x") for k in keys[start : start + 500]])
        self.assertGreater(h.keyed_writes, 0, "written back before any flush")
        self.assertGreater(h.values_fetched, 0, "forgotten keys fetched again")
        self.assertLessEqual(len(h.runtime.store.values["count"].held), 1024 + 500)
        out = h.process([("k0", "x"), ("k2999", "x")])
        self.assertEqual(pairs(out), [("k0", "4"), ("k2999", "4")], "no count lost or counted twice")
        self.assertEqual(h.state("count", "k1500"), 3)

    def test_long_values_are_written_back_at_the_end_of_their_call_and_not_held(self):
        h = Harness(Holder, {"weir.state": "empty"})
        long = ["x" * 20] * 20
        h.process([("a", codec.dumps(long)), ("b", "[1]")])
        self.assertEqual(h.keyed_writes, 1, "a's long list written back at once, b's short one held")
        self.assertEqual(h.runtime.store.values["v"].held.keys(), {b"b"})
        self.assertEqual(pairs(h.process([("a", "2"), ("b", "3")])), [("a", codec.dumps(long)), ("b", "[1]")])
        self.assertEqual(h.values_fetched, 1, "a fetched back")

    def test_a_list_changed_in_place_and_set_again_is_kept(self):
        class Appender(Operator):
            def init(self, config):
                self.items = ValueState("items")

            def process(self, ctx, event):
                items = self.items.get(ctx, [])
                items.append(event.value_str())
                self.items.set(ctx, items)
                ctx.emit(event.key, " ".join(items))

        h = Harness(Appender)
        h.process([("a", "1"), ("a", "2")])
        self.assertEqual(pairs(h.process([("a", "3")])), [("a", "1 2 3")])
        self.assertEqual(h.state("items", "a"), ["1", "2", "3"])

    def test_a_value_the_host_cannot_store_fails_the_call_that_set_it(self):
        h = Harness(Holder)
        with self.assertRaisesRegex(StateError, "value state `v`"):
            h.process([("a", "1"), ("b", "1e999")])

        class SetsASet(Operator):
            def init(self, config):
                self.v = ValueState("v")

            def process(self, ctx, event):
                self.v.set(ctx, {1, 2})

        with self.assertRaisesRegex(StateError, "cannot encode value state `v`"):
            Harness(SetsASet).process([("a", "x")])

        class SetsASurrogate(Operator):
            def init(self, config):
                self.v = ValueState("v")

            def process(self, ctx, event):
                self.v.set(ctx, "caf\u00e9 \ud800")

        with self.assertRaisesRegex(StateError, "cannot encode value state `v`"):
            Harness(SetsASurrogate).process([("a", "x")])
        h = Harness(Holder)
        h.process([("a", '"caf\u00e9"')])
        self.assertEqual(h.state("v", "a"), "caf\u00e9", "text beyond ASCII is held too")

    def test_what_a_failed_call_leaves_is_never_written_back(self):
        class FailsOnB(Operator):
            def init(self, config):
                self.count = ValueState("count")

            def process(self, ctx, event):
                self.count.set(ctx, self.count.get(ctx, 0) + 1)
                if event.key == b"b":
                    raise InputError("bad")

        h = Harness(FailsOnB, {"weir.state": "empty"})
        h.process([("a", "x")])
        with self.assertRaises(InputError):
            h.process([("a", "x"), ("b", "x")])
        h.flush()
        self.assertEqual(h._values.get("count", {}), {}, "the task restarts from its last checkpoint instead")


class WindowSums(Operator):
    """Sums values per key in the `windows` its subclass's `init` makes,
    emitting every result."""

    def process(self, ctx, event):
        for result in self.windows.add(ctx, event, float(event.value.decode())):
            ctx.emit(event.key, result)

    def on_timer(self, ctx, timer):
        for result in self.windows.on_timer(ctx, timer):
            ctx.emit(timer.key, result)


class Sessions(WindowSums):
    """Sessions of 100 ms, late events to `late`."""

    def init(self, config):
        self.windows = Windows.session("s", 100, SUM, late_output="late")


class SessionWindowTest(unittest.TestCase):
    """The Rust SDK's session tests (``weir_sdk::windows``), in Python."""

    def test_sessions_close_after_the_gap_and_merge_when_a_late_event_bridges_them(self):
        h = Harness(Sessions)
        h.process([("a", "1", 0), ("a", "1", 50), ("a", "10", 200), ("b", "7", 0)])
        self.assertEqual(h.raw_state("s", "a"), b"[[0,150,2.0,false],[200,300,10.0,false]]", "the Rust SDK's layout")
        self.assertEqual(pairs(h.advance_watermark(99)), [("b", '{"start":0,"end":100,"value":7.0}')])
        # An out-of-order event at 120 bridges a's two sessions into one.
        h.process([("a", "100", 120)])
        self.assertEqual(h.advance_watermark(200), [], "the first session no longer ends at 150")
        self.assertEqual(pairs(h.advance_watermark(299)), [("a", '{"start":0,"end":300,"value":112.0}')])
        self.assertEqual(h.values["s"], {}, "closed sessions are forgotten")

    def test_sessions_that_touch_merge(self):
        h = Harness(Sessions)
        h.process([("a", "1", 0), ("a", "2", 100), ("b", "1", 0), ("b", "2", 101)])
        fired = sorted(pairs(h.advance_watermark(10_000)))
        self.assertEqual(
            fired,
            [
                ("a", '{"start":0,"end":200,"value":3.0}'),
                ("b", '{"start":0,"end":100,"value":1.0}'),
                ("b", '{"start":101,"end":201,"value":2.0}'),
            ],
        )

    def test_a_late_event_extends_the_open_session_it_overlaps(self):
        h = Harness(Sessions)
        h.process([("a", "1", 400), ("b", "10", 450)])
        self.assertEqual(h.advance_watermark(449), [])
        # [250, 350) is gone (349 <= 449) but overlaps a's open [400, 500).
        late = h.process([("a", "100", 350), ("b", "5", 200)])
        self.assertEqual([(e.output, e.key) for e in late], [("late", b"b")])
        fired = pairs(h.advance_watermark(10_000))
        self.assertEqual(fired, [("a", '{"start":350,"end":500,"value":101.0}'), ("b", '{"start":450,"end":550,"value":10.0}')])

    def test_a_late_event_within_the_lateness_changes_a_fired_session_at_once(self):
        class Late(Sessions):
            def init(self, config):
                self.windows = Windows.session("s", 100, SUM, lateness=500)

        h = Harness(Late)
        h.process([("a", "1", 0)])
        self.assertEqual(pairs(h.advance_watermark(150)), [("a", '{"start":0,"end":100,"value":1.0}')])
        self.assertEqual(pairs(h.process([("a", "2", 30)])), [("a", '{"start":0,"end":130,"value":3.0}')])
        # Grown past the watermark, the session fires again at its new end.
        self.assertEqual(h.process([("a", "4", 100)]), [])
        self.assertEqual(pairs(h.advance_watermark(199)), [("a", '{"start":0,"end":200,"value":7.0}')])
        self.assertEqual(h.advance_watermark(10_000), [], "then forgotten after the lateness")
        self.assertEqual(h.values["s"], {})

    def test_sessions_need_a_gap_and_a_merging_aggregate(self):
        with self.assertRaisesRegex(ValueError, "the gap must be above 0 ms"):
            Windows.session("s", 0, SUM)
        no_merge = windows.Aggregate(lambda: 0, lambda acc, x: acc + 1, lambda acc: acc)
        with self.assertRaisesRegex(ValueError, "their aggregate needs a `merge`"):
            Windows.session("s", 10, no_merge)


class SensorWindowTest(unittest.TestCase):
    def test_sums_each_sensor_per_window_like_the_rust_plugin(self):
        h = Harness(SensorWindow)
        h.process([("p", "0.5", 1000), ("p", "-0.25", 1999), ("t", "20", 1500)])
        self.assertEqual((h.map_fetches, h.map_listings), (0, 2), "each key's windows listed once (restored: the host may have some)")
        self.assertEqual(h.advance_watermark(1998), [])
        self.assertEqual(
            pairs(h.advance_watermark(1999)),
            [("p", '{"start":1000,"end":2000,"value":0.25}'), ("t", '{"start":1000,"end":2000,"value":20.0}')],
        )
        self.assertEqual(h.maps["sums"], {}, "closed windows are forgotten")

    def test_state_layout_is_the_rust_one(self):
        h = Harness(SensorWindow)
        h.process([("p", "1.5", 1000)])
        h.flush()
        self.assertEqual(h.maps["sums"], {(b"p", b"1000"): b"[2000,1.5,false]"})

    def test_windows_stay_in_the_instance_until_the_host_asks_for_them(self):
        h = Harness(SensorWindow, {"weir.state": "empty", "lateness_ms": 500})
        h.process([("a", "1", 100), ("b", "2", 200), ("a", "4", 1100)])
        h.process([("a", "8", 300)])
        self.assertEqual((h.map_fetches, h.map_listings, h.keyed_writes), (0, 0, 0), "a fresh instance reads nothing, writes nothing")
        self.assertEqual(h.maps, {}, "the host has nothing before the flush")
        h.flush()
        self.assertEqual(
            h.maps["sums"],
            {(b"a", b"0"): b"[1000,9.0,false]", (b"a", b"1000"): b"[2000,4.0,false]", (b"b", b"0"): b"[1000,2.0,false]"},
        )
        h.flush()
        self.assertEqual(h.keyed_writes, 3, "nothing changed since: nothing written again")
        self.assertEqual(pairs(h.advance_watermark(999)), [("a", '{"start":0,"end":1000,"value":9.0}'), ("b", '{"start":0,"end":1000,"value":2.0}')])
        self.assertEqual(h.map_listings, 0, "timers fire held windows")
        h.flush()
        self.assertEqual(h.maps["sums"][(b"a", b"0")], b"[1000,9.0,true]", "fired, kept for the lateness")
        h.advance_watermark(1499)
        h.flush()
        self.assertEqual(h.maps["sums"], {(b"a", b"1000"): b"[2000,4.0,false]"}, "forgotten past the lateness, on the host too")

    def test_a_window_opened_and_fired_between_flushes_never_reaches_the_host(self):
        h = Harness(SensorWindow, {"weir.state": "empty"})
        h.process([("a", "1", 100), ("a", "2", 1100)])
        self.assertEqual(pairs(h.advance_watermark(999)), [("a", '{"start":0,"end":1000,"value":1.0}')])
        h.flush()
        self.assertEqual((h.maps["sums"], h.keyed_writes), ({(b"a", b"1000"): b"[2000,2.0,false]"}, 1))
        self.assertEqual(pairs(h.advance_watermark(1999)), [("a", '{"start":1000,"end":2000,"value":2.0}')])
        h.flush()
        self.assertEqual((h.maps["sums"], h.keyed_writes), ({}, 2), "a window the host had is removed from it")

    def test_a_restored_instance_lists_each_key_once_and_a_failed_call_forgets_what_it_held(self):
        class Failing(SensorWindow):
            def process(self, ctx, event):
                if event.value == b"fail":
                    raise ValueError("refused")
                super().process(ctx, event)

        h = Harness(Failing, {"weir.state": "restored"})
        h.maps["sums"] = {(b"a", b"0"): b"[1000,1.0,false]"}  # restored, with its timer
        h.timers.add((b"a", 999, True))
        h.process([("a", "2", 100), ("b", "4", 200)])
        h.process([("a", "8", 300)])
        self.assertEqual(h.map_listings, 2, "a and b listed once each")
        h.flush()
        self.assertEqual(h.maps["sums"], {(b"a", b"0"): b"[1000,11.0,false]", (b"b", b"0"): b"[1000,4.0,false]"})
        h.process([("a", "16", 400)])
        with self.assertRaisesRegex(Exception, "refused"):
            h.process([("a", "32", 500), ("a", "fail", 500)])
        h.flush()
        self.assertEqual(h.maps["sums"][(b"a", b"0")], b"[1000,11.0,false]", "the failed call, and the unflushed call before it, forgotten")
        h.process([("a", "64", 600)])
        self.assertEqual(h.map_listings, 3, "a read again after the failure")
        self.assertEqual(pairs(h.advance_watermark(999)), [("a", '{"start":0,"end":1000,"value":75.0}'), ("b", '{"start":0,"end":1000,"value":4.0}')])

    def test_past_its_share_of_the_memory_limit_the_instance_writes_windows_back_and_forgets(self):
        h = Harness(SensorWindow, {"weir.state": "empty", "weir.memory-limit-mb": "1"})  # 1 024 keys and windows
        keys = [f"k{i}" for i in range(600)]
        h.process([(k, "1", 100) for k in keys[:500]])
        self.assertEqual((h.keyed_writes, h.map_listings), (0, 0), "1 000 held: within the bound")
        h.process([(k, "2", 200) for k in keys])
        self.assertEqual((h.keyed_writes, h.map_listings), (600, 0), "1 200 held: written back and forgotten")
        self.assertEqual(h.maps["sums"][(b"k0", b"0")], b"[1000,3.0,false]")
        h.process([("k0", "4", 300), ("k599", "8", 300)])
        self.assertEqual(h.map_listings, 2, "forgotten keys are read again")
        fired = dict(pairs(h.advance_watermark(999)))
        self.assertEqual(len(fired), 600, "every window once")
        self.assertEqual((fired["k0"], fired["k599"]), ('{"start":0,"end":1000,"value":7.0}', '{"start":0,"end":1000,"value":10.0}'))

    def test_check_state_refuses_windows_stored_under_another_size(self):
        h = Harness(SensorWindow)
        h.check_state("sums", [b"[2000,1.5,false]"], is_map=True, sub_keys=[1000])
        with self.assertRaisesRegex(ValueError, r"windows `sums` hold the window \[0, 2000\), which tumbling windows of 1000 ms"):
            h.check_state("sums", [b"[2000,1.5,false]"], is_map=True, sub_keys=[0])
        with self.assertRaisesRegex(ValueError, "is not a window's start and end"):
            h.check_state("sums", [b"[2000,1.5,false]"], is_map=True, sub_keys=["x"])
        # Sliding windows: the start must be on the slide.
        sliding = Windows.sliding("hop", 1000, 250, SUM)
        sliding._check_stored(b"750", [1750, 1.0, False])
        with self.assertRaisesRegex(ValueError, "sliding windows of 1000 ms every 250 ms do not have"):
            sliding._check_stored(b"100", [1100, 1.0, False])
        # Windows offset by 300 ms (-700 modulo the size): their starts.
        h = Harness(SensorWindow, {"offset_ms": -700})
        h.check_state("sums", [b"[-700,1.5,false]"], is_map=True, sub_keys=[-1700])
        with self.assertRaisesRegex(ValueError, r"\[1000, 2000\), which tumbling windows of 1000 ms offset by 300 ms do not"):
            h.check_state("sums", [b"[2000,1.5,false]"], is_map=True, sub_keys=[1000])

    def test_an_offset_shifts_the_windows_starts_as_flinks(self):
        h = Harness(SensorWindow, {"offset_ms": 300})
        h.process([("p", "1", 250), ("p", "2", 300), ("p", "4", 1299)])
        self.assertEqual(pairs(h.advance_watermark(299)), [("p", '{"start":-700,"end":300,"value":1.0}')])
        self.assertEqual(h.advance_watermark(999), [], "[300, 1300) is open at 999")
        self.assertEqual(pairs(h.advance_watermark(1299)), [("p", '{"start":300,"end":1300,"value":6.0}')])
        sliding = Windows.sliding("hop", 1000, 500, SUM, offset=100)
        self.assertEqual(sliding.assign(1200), [(600, 1600), (1100, 2100)])
        self.assertEqual(sliding.assign(1099), [(100, 1100), (600, 1600)])
        hour = 3_600_000
        utc8 = Windows.tumbling("d", 24 * hour, SUM, offset=-8 * hour)
        self.assertEqual(utc8.assign(5 * 24 * hour + 12 * hour), [(4 * 24 * hour + 16 * hour, 5 * 24 * hour + 16 * hour)])

    def test_late_events_go_to_the_side_output(self):
        h = Harness(SensorWindow)
        h.process([("p", "1", 100)])
        h.advance_watermark(1500)
        out = h.process([("p", "2", 200)])
        self.assertEqual([(e.output, e.key, e.value) for e in out], [("late", b"p", b"2")])

    def test_an_event_between_hopping_windows_is_late_only_behind_the_watermark(self):
        class Hopping(WindowSums):
            def init(self, config):
                self.windows = Windows.sliding("hops", 200, 500, SUM, late_output="late")

        h = Harness(Hopping)
        # 300 falls between [0, 200) and [500, 700): dropped, as in time.
        self.assertEqual(h.process([("a", "1", 100), ("a", "2", 300), ("a", "3", 550)]), [])
        h.advance_watermark(1000)
        out = h.process([("a", "4", 350)])
        self.assertEqual([(e.output, e.key, e.value) for e in out], [("late", b"a", b"4")])

    def test_a_late_event_refires_sliding_windows_latest_start_first(self):
        class Sliding(WindowSums):
            def init(self, config):
                self.windows = Windows.sliding("slides", 1000, 500, SUM, lateness=5000)

        h = Harness(Sliding)
        h.process([("a", "1", 700)])
        on_time = [e.value.decode() for e in h.advance_watermark(2000)]
        self.assertEqual(on_time, ['{"start":0,"end":1000,"value":1.0}', '{"start":500,"end":1500,"value":1.0}'])
        late = [e.value.decode() for e in h.process([("a", "2", 600)])]
        self.assertEqual(late, ['{"start":500,"end":1500,"value":3.0}', '{"start":0,"end":1000,"value":3.0}'], "as Flink")

    def test_allowed_lateness_updates_fired_windows(self):
        h = Harness(SensorWindow, {"lateness_ms": 500})
        h.process([("a", "1", 100)])
        self.assertEqual(pairs(h.advance_watermark(999)), [("a", '{"start":0,"end":1000,"value":1.0}')])
        updated = h.process([("a", "2", 200)])
        self.assertEqual(pairs(updated), [("a", '{"start":0,"end":1000,"value":3.0}')])
        self.assertEqual(updated[0].timestamp, 999, "stamped as the window's firing, not with the late event's time")
        self.assertEqual(h.advance_watermark(1499), [])
        self.assertEqual(h.maps["sums"], {})

    def test_windows_opened_before_the_lateness_was_raised_still_leave(self):
        before = Harness(SensorWindow)
        before.process([("a", "1", 100)])
        before.flush()  # as the host does before the snapshot the job restores from
        h = Harness(SensorWindow, {"lateness_ms": 500})  # restored from `before`'s state
        h.maps, h.timers, h.watermark = before.maps, before.timers, before.watermark
        self.assertEqual(pairs(h.advance_watermark(999)), [("a", '{"start":0,"end":1000,"value":1.0}')])
        self.assertEqual(pairs(h.process([("a", "2", 200)])), [("a", '{"start":0,"end":1000,"value":3.0}')])
        self.assertEqual(h.advance_watermark(1499), [])
        h.flush()
        self.assertEqual(h.maps["sums"], {}, "forgotten at its end plus the lateness")

    def test_processing_time_windows(self):
        h = Harness(SensorWindow, {"time": "processing"})
        h.advance_processing_time(5100)
        h.process([("a", "1", 1), ("a", "2", 999999)])
        self.assertEqual(h.advance_watermark(2**62), [])
        self.assertEqual(h.advance_processing_time(5999), [], "its last millisecond has not passed")
        h.process([("a", "4")])  # still the window's: it fires once
        self.assertEqual(pairs(h.advance_processing_time(6000)), [("a", '{"start":5000,"end":6000,"value":7.0}')])

    def test_timers_fire_as_the_host_fires_them(self):
        class Chain(Operator):
            def process(self, ctx, event):
                ctx.register_timer(10)
                ctx.register_timer(20)

            def on_timer(self, ctx, timer):
                ctx.emit(timer.key, timer.timestamp)
                if timer.timestamp == 10:
                    ctx.delete_timer(20)  # the key's next timer: in a later call, so it does not fire
                    ctx.register_timer(15)  # reached: fires in the same advance

        h = Harness(Chain)
        h.process([("a", "x")])
        self.assertEqual(pairs(h.advance_watermark(30)), [("a", "10"), ("a", "15")])
        h.process([("b", "x")])
        self.assertEqual(h.advance_watermark(30), [], "a watermark that does not move fires nothing")

    def test_bad_config_and_input(self):
        for config in ({"time": "wall"}, {"size_ms": "0"}, {"size_ms": "x"}, {"sise_ms": "1"}):
            with self.assertRaises(ConfigError, msg=str(config)):
                Harness(SensorWindow, config)
        with self.assertRaisesRegex(InputError, "expected a number"):
            Harness(SensorWindow).process([("a", "abc", 1)])
        with self.assertRaisesRegex(InputError, "timestamps"):
            Harness(SensorWindow).process([("a", "1")])


class MapStateListingTest(unittest.TestCase):
    def test_checkout_lists_the_cart_in_item_order_and_empties_it(self):
        h = Harness(Cart)
        h.process([("ann", "add pear"), ("ann", "add apple"), ("bob", "add fig"), ("ann", "add pear")])
        out = h.process([("ann", "remove fig"), ("ann", "add fig"), ("ann", "checkout"), ("ann", "checkout")])
        self.assertEqual(pairs(out), [("ann", "apple×1 fig×1 pear×2"), ("ann", "empty")])
        self.assertEqual(pairs(h.process([("bob", "checkout")])), [("bob", "fig×1")], "another key's cart is its own")
        self.assertEqual(h.maps["cart"], {}, "cleared on the host")
        self.assertEqual(pairs(h.process([("ann", "add kiwi"), ("ann", "checkout")])), [("ann", "kiwi×1")])

    def test_a_listing_pages_through_the_host_and_lays_the_calls_writes_over_it(self):
        h = Harness(Cart)
        h.process([("ann", f"add item{i:05}") for i in range(10_000)])
        out = h.process([("ann", "remove item00004"), ("ann", "add zz"), ("ann", "add item00003"), ("ann", "checkout")])
        listed = out[0].value.decode().split(" ")
        self.assertEqual(len(listed), 10_000, "three pages of stored entries, less one removed, plus one new")
        self.assertEqual(listed[3:5], ["item00003×2", "item00005×1"])
        self.assertEqual(listed[-1], "zz×1")

    def test_a_key_is_empty_when_the_call_removed_all_it_held_and_wrote_nothing(self):
        class Probe(Operator):
            def init(self, config):
                self.m = MapState("m")

            def process(self, ctx, event):
                command, _, sub_key = event.value_str().partition(" ")
                if command == "set":
                    self.m.set(ctx, sub_key, 1)
                elif command == "remove":
                    self.m.remove(ctx, sub_key)
                ctx.emit(event.key, str(self.m.is_empty(ctx)))

        h = Harness(Probe)
        self.assertEqual([e.value for e in h.process([("k", "ask"), ("k", "set a"), ("k", "set b")])], [b"True", b"False", b"False"])
        out = h.process([("k", "remove a"), ("k", "remove b"), ("k", "set c"), ("k", "remove c")])
        self.assertEqual([e.value for e in out], [b"False", b"True", b"False", b"True"])

    def test_an_unknown_command_is_a_clear_error(self):
        with self.assertRaisesRegex(InputError, "use `add ITEM`"):
            Harness(Cart).process([("ann", "buy")])

    def test_keys_come_back_as_text(self):
        class Keys(Operator):
            def init(self, config):
                self.m = MapState("m")

            def process(self, ctx, event):
                self.m.set(ctx, 7, "seven")
                self.m.set(ctx, b"\xff", "not text")
                ctx.emit(event.key, repr(self.m.keys(ctx)))

        self.assertEqual(pairs(Harness(Keys).process([("k", "x")])), [("k", "['7', b'\\xff']")])


class ListStateTest(unittest.TestCase):
    def test_groups_keep_their_order_across_batches_and_start_again_after_a_clear(self):
        h = Harness(CountWindow)
        out = h.process([(["a", "b"][i % 2], f"e{i}") for i in range(5)])
        self.assertEqual(pairs(out), [("a", "e0 e2 e4")])
        self.assertEqual(pairs(h.process([("b", "e5"), ("a", "e6")])), [("b", "e1 e3 e5")], "a's e6 waits")
        self.assertEqual(h.maps["group"], {(b"a", b"00000000000000000000"): b'"e6"'}, "the Rust layout, from index 0")
        self.assertEqual(h.values["group#next"], {b"a": b"1"})

    def test_a_size_below_one_is_refused(self):
        with self.assertRaisesRegex(ConfigError, "`size` must be at least 1"):
            Harness(CountWindow, {"size": 0})

    def test_reads_a_list_the_rust_sdk_wrote(self):
        h = Harness(CountWindow)
        h.maps["group"] = {(b"k", b"00000000000000000000"): b'"x"', (b"k", b"00000000000000000001"): b'"y"'}
        h.values["group#next"] = {b"k": b"2"}
        self.assertEqual(pairs(h.process([("k", "z")])), [("k", "x y z")])


class TimersAndOutputsTest(unittest.TestCase):
    def test_timers_side_outputs_and_clocks(self):
        class Op(Operator):
            def process(self, ctx, event):
                ctx.register_timer(event.timestamp + 10)
                ctx.register_timer(7, TimeDomain.PROCESSING_TIME)
                ctx.emit(event.key, {"wm": ctx.watermark}, output="side")

            def on_timer(self, ctx, timer):
                ctx.emit(timer.key, [timer.timestamp, timer.domain.value, ctx.processing_time])

        h = Harness(Op)
        out = h.process([("k", "v", 5)])
        self.assertEqual([(e.output, e.value) for e in out], [("side", b'{"wm":null}')])
        self.assertEqual(pairs(h.advance_watermark(20)), [("k", '[15,"event",0]')])
        self.assertEqual(pairs(h.advance_processing_time(9)), [("k", '[7,"processing",9]')])


class BroadcastTest(unittest.TestCase):
    def test_broadcast_state_is_written_only_from_broadcast_inputs(self):
        from weir_sdk import BroadcastState

        class Rules(Operator):
            def init(self, config):
                self.rules = BroadcastState("rules")

            def process(self, ctx, event):
                if ctx.input == 1:
                    self.rules.set(ctx, event.key, event.value_str())
                else:
                    ctx.emit(event.key, self.rules.get(ctx, event.key, "none"))

        h = Harness(Rules, broadcast_inputs=[1])
        h.process([("a", "allow")], input=1, keyed=False)
        self.assertEqual(pairs(h.process([("a", "x"), ("b", "x")])), [("a", "allow"), ("b", "none")])
        self.assertEqual(h.broadcast["rules"], {b"a": b'"allow"'})
        with self.assertRaisesRegex(StateError, "broadcast input"):
            Harness(Rules).process([("a", "deny")], input=1, keyed=False)

    def test_check_state_covers_broadcast_states(self):
        from weir_sdk import BroadcastState

        class Limits(Operator):
            def init(self, config):
                self.limits = BroadcastState("limits", validate=lambda v: type(v) is int)

            def process(self, ctx, event):
                pass

        h = Harness(Limits)
        h.check_state("limits", [b"5"], sub_keys=["a"], broadcast=True)
        with self.assertRaisesRegex(ValueError, r"broadcast state `limits`: stored value #0 \(true\)"):
            h.check_state("limits", [b"true"], sub_keys=["a"], broadcast=True)
        with self.assertRaisesRegex(ValueError, "declares no broadcast state `thresholds`"):
            h.check_state("thresholds", [b"1"], sub_keys=["a"], broadcast=True)


class TtlTest(unittest.TestCase):
    """Values, entries and list items expire a time-to-live after their last
    write (or read, refreshed on read), by the harness's processing time."""

    def at(self, h, now, *ids):
        h.advance_processing_time(now)
        return [e.key.decode() for e in h.process([(i, i) for i in ids])]

    def test_the_dedup_twin_passes_repeats_once_their_ids_expired(self):
        h = Harness(Dedup, {"ttl_ms": "1000"})
        self.assertEqual(self.at(h, 0, "a", "b", "a"), ["a", "b"])
        self.assertEqual(self.at(h, 500, "a", "c"), ["c"])
        self.assertEqual(self.at(h, 1000, "a", "b", "c"), ["a", "b"], "a and b expired at 1000, c lives to 1500")
        forever = Harness(Dedup, {"ttl_ms": "0"})
        self.assertEqual(self.at(forever, 0, "a") + self.at(forever, 10**12, "a"), ["a"])

    def test_entries_items_and_refreshed_values_expire(self):
        class Recent(Operator):
            def init(self, config):
                ttl = Ttl(1000)
                self.seen = MapState("seen", ttl=ttl)
                self.log = ListState("log", ttl=ttl)
                self.touched = ValueState("touched", ttl=Ttl(1000, refresh_on_read=True))

            def process(self, ctx, event):
                value = event.value_str()
                touched = self.touched.get(ctx, False)
                if value == "peek":
                    ctx.emit(event.key, f"touched {touched}")
                    return
                self.touched.set(ctx, True)
                self.seen.set(ctx, value, 1)
                self.log.add(ctx, value)
                ctx.emit(event.key, f"{' '.join(self.seen.keys(ctx))} / {' '.join(self.log.get(ctx))}")

        h = Harness(Recent)

        def at(now, value):
            h.advance_processing_time(now)
            return h.process([("k", value)])[0].value.decode()

        self.assertEqual(at(0, "x"), "x / x")
        self.assertEqual(at(500, "y"), "x y / x y")
        self.assertEqual(at(1200, "z"), "y z / y z", "x expired at 1000")
        for now in (2100, 3000):
            self.assertEqual(at(now, "peek"), "touched True", f"read at {now}")
        self.assertEqual(at(4001, "peek"), "touched False", "unread for 1000 ms")

    def test_a_time_to_live_is_a_positive_whole_number_of_milliseconds(self):
        for bad in (0, -5, 1.5, "1000"):
            with self.assertRaisesRegex(ValueError, "at least 1"):
                Ttl(bad)


class CodecTest(unittest.TestCase):
    def test_json_floats_as_serde_json_writes_them(self):
        cases = {20.0: "20.0", 0.25: "0.25", 1e16: "1e16", 1e15: "1000000000000000.0", 1.5e20: "1.5e20",
                 1e-5: "0.00001", 1e-6: "1e-6", -0.0: "-0.0", float("nan"): "null"}
        for x, text in cases.items():
            self.assertEqual(codec.dumps(x), text, repr(x))
        self.assertEqual(codec.dumps({"a": [1, True, None, "é\n"]}), '{"a":[1,true,null,"é\\n"]}')

    def test_event_floats_as_rust_display(self):
        self.assertEqual(codec.encode(20.0), b"20")
        self.assertEqual(codec.encode(1e-7), b"0.0000001")
        self.assertEqual(codec.encode(-1.5), b"-1.5")


if __name__ == "__main__":
    unittest.main()
