"""The registry loads plugins through entry points, isolates broken ones, and suggests names."""

import pytest

from rlplugs.config import StrictConfig, validate_options
from rlplugs.registry import Registry, UnknownOptionError, UnknownPluginError


def test_test_environments_load_through_entry_points():
    reg = Registry()
    envs = reg.table("environment")
    assert {"letters-test", "count-test"} <= set(envs)
    assert envs["letters-test"].plugin == "letters-test"


def test_broken_plugin_is_reported_by_name_and_others_still_load():
    reg = Registry()
    broken = {b.name: b for b in reg.broken}
    assert "broken-test" in broken
    assert "broken on purpose" in broken["broken-test"].error
    assert "letters-test" in reg.table("environment")


def test_misspelled_hook_makes_the_plugin_broken_naming_the_closest_hook():
    reg = Registry()
    broken = {b.name: b for b in reg.broken}
    assert "unknown hook 'rlplugs_register_enviroments' (did you mean 'rlplugs_register_environments'?)" in (
        broken["misspelled-test"].error
    )
    assert "misspelled-test" not in reg.table("environment")
    assert not reg.pm.has_plugin("misspelled-test")  # unregistered: the pending hook is gone with it
    reg.pm.check_pending()


def test_unknown_environment_lists_known_names_and_closest_match():
    reg = Registry()
    with pytest.raises(UnknownPluginError) as err:
        reg.get("environment", "leters-test")
    msg = str(err.value)
    assert "Did you mean 'letters-test'" in msg
    assert "count-test" in msg and "broken-test" in msg


def test_unknown_config_key_is_an_error_with_suggestion():
    reg = Registry()
    with pytest.raises(UnknownOptionError) as err:
        reg.get("environment", "letters-test").build({"rowz": 3})
    assert "did you mean 'rows'" in str(err.value)


def test_validate_options_reports_every_valid_key():
    class Cfg(StrictConfig):
        alpha: int = 1
        beta: float = 2.0

    with pytest.raises(UnknownOptionError) as err:
        validate_options(Cfg, {"alpah": 3}, owner="demo")
    assert "'alpah' (did you mean 'alpha'?)" in str(err.value)
    assert "Valid options: alpha, beta" in str(err.value)
    assert validate_options(Cfg, {"beta": 3}).beta == 3.0


def test_a_key_unknown_inside_nested_options_is_named_by_its_path_with_suggestions():
    """It was pydantic's 'retry.attempt: Extra inputs are not permitted', with no suggestion."""
    class Retry(StrictConfig):
        attempts: int = 3
        timeout_s: float = 30.0

    class Cfg(StrictConfig):
        rows: int = 1
        retry: Retry | None = None

    with pytest.raises(UnknownOptionError) as err:
        validate_options(Cfg, {"rows": 2, "retry": {"attempt": 5}}, owner="demo")
    assert str(err.value) == ("unknown option for 'demo': 'retry.attempt' (did you mean 'retry.attempts'?). "
                              "Valid options: retry.attempts, retry.timeout_s.")
    assert validate_options(Cfg, {"retry": {"attempts": 5}}).retry.attempts == 5


def test_closest_shows_the_spelling_of_the_query_whatever_the_order():
    """``--max_steps`` and ``--max-steps`` both exist (TRL's parser accepts both): a misspelled
    ``--max_stpes`` is told ``--max_steps``, for any order of the known names (a set's order
    changes with the hash seed, which made the launcher's hint flip between runs)."""
    from rlplugs import closest

    for known in (["--max-steps", "--max_steps", "--save_steps"], ["--max_steps", "--max-steps", "--save_steps"]):
        assert closest("--max_stpes", known, n=2) == ["--max_steps", "--save_steps"]
        assert closest("--max-stpes", known, n=1) == ["--max-steps"]


def test_the_registration_names_the_env(monkeypatch):
    """An env writes its name once, in its Registration: make_env gives the EnvSpec that name, and a
    factory that names its spec otherwise is refused (the two literals could drift apart)."""
    import rlplugs
    from rlplugs import registry as registry_module

    assert rlplugs.make_env("letters-test").name == "letters-test"  # letters' factory gives no name

    def misnamed():
        return rlplugs.EnvSpec(name="letters", description="", datasets={}, preflight_samples=list,
                               components=[rlplugs.RewardComponent("one", lambda s: 1.0)])

    class Plugin:
        @rlplugs.hookimpl
        def rlplugs_register_environments(self):
            return [rlplugs.Registration("misnamed-test", misnamed)]

    reg = Registry(entry_points=[])
    reg.register(Plugin(), "misnamed-plugin")
    monkeypatch.setattr(registry_module, "get_registry", lambda: reg)
    with pytest.raises(TypeError, match="registers env 'misnamed-test' but its factory names the EnvSpec 'letters'"):
        rlplugs.make_env("misnamed-test")


def test_an_env_package_names_itself_by_its_module():
    from rlplugs.registry import env_for_module

    assert env_for_module("letters_test") == "letters-test"
    assert env_for_module("count_test.sub") == "count-test"
    with pytest.raises(UnknownPluginError, match="no registered environment is importable as module 'nothing_here'"):
        env_for_module("nothing_here")
