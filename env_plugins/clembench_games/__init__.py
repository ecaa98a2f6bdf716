"""clembench-games: clean-room, clembench-2.0-style dialogue games for RL and SFT.

Six games written from their public rules (wordle, wordle_withclue, wordle_withcritic, taboo,
referencegame, privateshared), each a :class:`~clembench_games.master.GameMaster`; episodes follow
:class:`rlplugs.episode.Episode`, scores follow clembench (Main Score, Played, Aborted, Success,
Lose; clemscore). ``plugin.py`` registers the environment and the ``rlplugs games`` commands;
``clem_adapter.py`` plays a user's own clembench checkout through clemcore (optional extra).
"""

from clembench_games.instances import GAMES, instances, new_game
from clembench_games.master import GameEpisode, GameMaster, play_scripted
from clembench_games.scoring import clem_table

__all__ = ["GAMES", "GameEpisode", "GameMaster", "clem_table", "instances", "new_game", "play_scripted"]
