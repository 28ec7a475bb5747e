"""What every stage shares, and nothing else: the user-facing error family
(:mod:`.errors`), the outcome of one check (:mod:`.findings`) and the version.

The bottom layer: it imports nothing of expkit's, so every stage may import it.
"""
