"""The user's tools around training: the ``rlplugs`` command, evaluation and its report, the
policies that play episodes, and the OpenAI-compatible policy server."""
