"""QuietPeriods on its own: which growth a report or a dismissal silences, and for how long."""
import pytest

from trainers.diagnosis.evidence import GROWTH, Suspicion
from trainers.diagnosis.quiet import DISMISSED_FOR, REPORTED_FOR, QuietPeriods, rate

KEY = ("container", ("loop.py", 9), "curve")
OTHER = ("held", ("loop.py", 30), "curve")


def growing(nodes, iteration=0, every=1):
    return Suspicion(GROWTH, iteration, nodes=nodes, every=every)


def test_rate_is_nodes_per_iteration_of_the_cadence():
    assert rate(growing(8, every=4)) == 2
    assert rate(growing(8, every=1)) == 8
    assert rate(growing(8, every=0)) == 8  # a cadence not yet measured counts as one iteration


def test_a_report_silences_its_rate_until_its_period_ends_and_no_later():
    quiet = QuietPeriods()
    quiet.reported(growing(8), KEY, iteration=22)  # the first report: REPORTED_FOR * 2
    end = 22 + REPORTED_FOR * 2
    assert quiet.silences(growing(8, end - 1)) and not quiet.silences(growing(8, end))
    assert quiet.silences_finding(KEY, end - 1) and not quiet.silences_finding(KEY, end)
    assert not quiet.silences_finding(OTHER, 23)
    assert not quiet.silences_finding(None, 23)  # a finding without a key is never quiet


def test_rates_within_five_percent_are_the_same_growth():
    quiet = QuietPeriods()
    quiet.reported(growing(20), KEY, iteration=0)
    assert quiet.silences(growing(19, 1))  # exactly 5 % of the larger rate: the same growth
    assert quiet.silences(growing(20.9, 1))
    assert not quiet.silences(growing(18.9, 1)) and not quiet.silences(growing(21.1, 1))
    quiet = QuietPeriods()
    quiet.reported(growing(100), KEY, iteration=0)
    assert quiet.silences(growing(104, 1)) and not quiet.silences(growing(106, 1))


def test_the_same_finding_reported_again_doubles_its_period_whatever_its_rate():
    quiet = QuietPeriods()
    quiet.reported(growing(8), KEY, iteration=0)
    quiet.reported(growing(20), KEY, iteration=10)  # one finding, another rate: one period, count 2
    end = 10 + REPORTED_FOR * 4
    assert quiet.silences(growing(8, end - 1)) and quiet.silences(growing(20, end - 1))
    assert not quiet.silences(growing(8, end))


@pytest.mark.parametrize("times, doublings", [(3, 3), (6, 6), (7, 6), (9, 6)])
def test_a_reported_period_doubles_each_time_up_to_six_doublings(times, doublings):
    quiet = QuietPeriods()
    for iteration in range(times):
        quiet.reported(growing(8), KEY, iteration=iteration)
    end = times - 1 + REPORTED_FOR * 2 ** doublings
    assert quiet.silences(growing(8, end - 1)) and not quiet.silences(growing(8, end))


@pytest.mark.parametrize("times, doublings", [(1, 1), (2, 2), (3, 3), (4, 4), (5, 4), (8, 4)])
def test_a_dismissal_doubles_each_time_the_same_rate_recurs_up_to_four_doublings(times, doublings):
    quiet = QuietPeriods()
    for iteration in range(times):
        quiet.dismissed(growing(8), iteration=iteration)
    end = times - 1 + DISMISSED_FOR * 2 ** doublings
    assert quiet.silences(growing(8, end - 1)) and not quiet.silences(growing(8, end))


def test_a_dismissal_at_another_rate_starts_its_own_period():
    quiet = QuietPeriods()
    quiet.dismissed(growing(8), iteration=0)
    quiet.dismissed(growing(20), iteration=0)  # not the same false alarm: its first period
    assert quiet.silences(growing(20, DISMISSED_FOR * 2 - 1)) and not quiet.silences(growing(20, DISMISSED_FOR * 2))
    assert not quiet.silences(growing(8, DISMISSED_FOR * 2))


def test_a_dismissal_never_lengthens_a_reported_period():
    quiet = QuietPeriods()
    quiet.reported(growing(8), KEY, iteration=0)  # quiet until 20
    quiet.dismissed(growing(8), iteration=30)  # a false alarm at that rate later: quiet until 38
    assert quiet.silences(growing(8, 37)) and not quiet.silences(growing(8, 38))
    assert not quiet.silences_finding(KEY, 30)


def test_a_period_remembers_only_its_four_latest_rates():
    quiet = QuietPeriods()
    for iteration, nodes in enumerate([1, 2, 3, 4, 5]):
        quiet.reported(growing(nodes), KEY, iteration=iteration)
    assert not quiet.silences(growing(1, 10))
    assert all(quiet.silences(growing(nodes, 10)) for nodes in [2, 3, 4, 5])


def test_also_known_as_adds_a_rate_to_that_findings_period_only():
    quiet = QuietPeriods()
    quiet.reported(growing(8), KEY, iteration=0)  # quiet until 20
    quiet.reported(growing(50), OTHER, iteration=50)  # quiet until 70
    quiet.also_known_as(growing(30), OTHER)
    assert quiet.silences(growing(30, 60))  # OTHER's period, still running
    assert not quiet.silences(growing(30, 75))
    assert not quiet.silences(growing(8, 60))  # KEY's period ended, and did not take the rate


def test_only_the_eight_latest_periods_are_kept():
    quiet = QuietPeriods()
    for n in range(9):
        quiet.reported(growing(10 * 2 ** n), ("held", ("loop.py", n), "curve"), iteration=n)
    assert not quiet.silences(growing(10, 9))  # the first, dropped for the ninth
    assert all(quiet.silences(growing(10 * 2 ** n, 9)) for n in range(1, 9))


def test_clear_ends_every_period():
    quiet = QuietPeriods()
    quiet.reported(growing(8), KEY, iteration=0)
    quiet.dismissed(growing(20), iteration=0)
    quiet.clear()
    assert not quiet.silences(growing(8, 1)) and not quiet.silences(growing(20, 1))
    assert not quiet.silences_finding(KEY, 1)
    quiet.reported(growing(8), KEY, iteration=2)  # and it works afterwards
    assert quiet.silences(growing(8, 3))
