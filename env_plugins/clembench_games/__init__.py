"""clembench-games: clean-room, clembench-2.0-style dialogue games for RL and SFT.

Six games written from their public rules (wordle, wordle_withclue, wordle_withcritic, taboo,
referencegame, privateshared), each a :class:`~clembench_games.master.GameMaster`; episodes follow
:class:`rlplugs.episode.Episode`, scores follow clembench (Main Score, Played, Aborted, Success,
Lose; clemscore). ``plugin.py`` registers the environment and the ``rlplugs games`` commands;
``clem_adapter.py`` plays a user's own clembench checkout through clemcore (optional extra).

Read in order: ``words`` -> ``master`` -> the games (``wordle``, ``taboo``, ``referencegame``,
``privateshared``) -> ``instances`` -> ``scoring`` -> ``transcripts`` -> ``sft`` -> ``plugin`` ->
``cli`` -> ``clem_adapter``. The verifiers v1 classes (``env.taskset.id = "clembench-games"``)
are built from the EnvSpec on first access, so importing this package never needs verifiers.
"""

from clembench_games.instances import GAMES as GAMES
from clembench_games.instances import instances as instances
from clembench_games.instances import new_game as new_game
from clembench_games.master import GameEpisode as GameEpisode
from clembench_games.master import GameMaster as GameMaster
from clembench_games.master import play_scripted as play_scripted
from clembench_games.scoring import clem_table as clem_table

#: What verifiers looks for: one Taskset, the multi-seat Env, and the local chat harness.
__all__ = ["ClembenchGamesTaskset", "ClembenchGamesEnv", "ClembenchGamesHarness"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module 'clembench_games' has no attribute {name!r}")
    from rlplugs import verifiers_export

    return verifiers_export(__name__, name)
