"""Small environments used by rlplugs' tests; registered exactly as a third-party plugin would be
(an installed distribution's ``rlplugs`` entry points, see the ``.dist-info`` beside this)."""
