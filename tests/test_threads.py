"""The choice of torch's intra-op threads: given CPUs, the work other processes do, the kind of work and
the overrides (``--threads``, ``PROBES_THREADS``, ``OMP_NUM_THREADS``)."""

import pytest
import torch

from probes import threads
from probes.errors import BadOption
from probes.threads import choose


@pytest.mark.parametrize("cpus,busy,expected", [
    (2, 0.0, 2),  # a quiet machine: every CPU
    (2, 0.2, 2),  # a little noise leaves the CPU free
    (2, 1.0, 1),  # one busy process: one CPU left
    (2, 0.6, 1),  # a CPU kept busy more than a quarter of the time is taken
    (2, 2.0, 1),  # all busy: still one thread, never none
    (2, 7.5, 1),
    (16, 3.1, 13),  # three CPUs taken, the tenth of a fourth is noise
    (16, 3.4, 12),
    (8, None, 8),  # not measured: taken as free
    (1, 0.0, 1),
])
def test_a_profile_takes_the_free_cpus(cpus, busy, expected):
    choice = choose("profile", cpus, busy)
    assert choice.threads == expected and choice.set_by == "auto"


@pytest.mark.parametrize("cpus,busy,expected", [(2, 0.0, 1), (4, 0.0, 2), (8, 1.0, 3), (64, 0.0, 4), (1, 0.0, 1),
                                                (4, 3.0, 1)])
def test_the_app_takes_half_the_free_cpus_at_most_four(cpus, busy, expected):
    assert choose("app", cpus, busy).threads == expected


def test_a_worker_takes_one_thread_unless_ray_gave_it_more():
    assert choose("worker", 16, 0.0).threads == 1
    assert choose("worker", 16, 0.0, {"OMP_NUM_THREADS": "4"}).threads == 4  # what Ray sets for num_cpus=4


def test_overrides_come_first_in_order():
    env = {"PROBES_THREADS": "3", "OMP_NUM_THREADS": "5"}
    assert choose("profile", 2, 1.9, env, threads=6).threads == 6
    got = choose("profile", 2, 1.9, env)
    assert (got.threads, got.set_by) == (3, "PROBES_THREADS")
    got = choose("app", 2, 0.0, {"OMP_NUM_THREADS": "5"})
    assert (got.threads, got.set_by) == (5, "OMP_NUM_THREADS")
    assert choose("profile", 2, 0.0, {"PROBES_THREADS": " "}).set_by == "auto"  # blank: unset


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5", "2,1"])
def test_a_bad_probes_threads_is_a_clear_error(value):
    with pytest.raises(BadOption, match=r"PROBES_THREADS=.*1 or more"):
        choose("profile", 2, 0.0, {"PROBES_THREADS": value})


@pytest.mark.parametrize("value", [0, -1, True, 2.0])
def test_a_bad_explicit_count_is_a_clear_error(value):
    with pytest.raises(BadOption, match="--threads"):
        choose("profile", 2, 0.0, {}, value)


def test_an_omp_num_threads_that_is_not_a_count_is_left_to_openmp():
    assert choose("profile", 2, 0.0, {"OMP_NUM_THREADS": "4,2"}).set_by == "auto"


def test_unknown_kind_or_no_cpus_are_programming_errors():
    with pytest.raises(ValueError, match="kind"):
        choose("server", 2, 0.0)
    with pytest.raises(ValueError, match="cpus"):
        choose("profile", 0, 0.0)


def test_describe_says_why():
    assert choose("profile", 2, 1.0).describe() == "torch threads: 1 (profile; 2 CPUs, 1.0 busy with other work)"
    assert choose("profile", 2, 0.0, threads=3).describe() == "torch threads: 3 (--threads)"


def test_this_machine_is_measured():
    assert threads.usable_cpus() >= 1
    busy = threads.busy_cpus(0.05)
    assert busy is None or 0.0 <= busy <= threads.usable_cpus() * 1.5


def test_apply_sets_torch_and_watches_the_machine_once_per_process(monkeypatch):
    before = torch.get_num_threads()
    watched = []  # one entry a look at the machine's load

    def busy_cpus():
        watched.append(1)
        return 1.0

    monkeypatch.setattr(threads, "_seen", {})
    monkeypatch.setattr(threads, "usable_cpus", lambda: 2)
    monkeypatch.setattr(threads, "busy_cpus", busy_cpus)
    try:
        assert threads.apply("profile", env={"PROBES_THREADS": "2"}).threads == 2 and torch.get_num_threads() == 2
        assert watched == []  # an override needs no watching
        choice = threads.apply("profile", env={})
        assert (choice.threads, choice.busy, torch.get_num_threads()) == (1, 1.0, 1)
        assert threads.apply("app", env={}).threads == 1 and watched == [1]  # reruns cost nothing
        with pytest.raises(BadOption, match="PROBES_THREADS"):
            threads.apply("profile", env={"PROBES_THREADS": "many"})
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("cpus,busy,batch", [(2, 0.0, 2), (2, 1.0, 1), (16, 3.4, 12), (1, 0.0, 1)])
def test_commands_take_the_free_cpus_for_whole_passes_and_one_for_a_token_at_a_time(cpus, busy, batch):
    assert choose("batch", cpus, busy).threads == choose("profile", cpus, busy).threads == batch
    assert choose("stream", cpus, busy).threads == 1
    assert choose("stream", cpus, busy).describe() == f"torch threads: 1 (stream; {cpus} CPUs, {busy:.1f} busy with " \
                                                      "other work)"
    assert choose("stream", cpus, busy, {"PROBES_THREADS": "2"}).threads == 2  # an override is used as given
