"""``rmtl view``: look at the reward. A store's episodes (or a policy's rollouts rendered on the
fly) with every number the reward computes on them, as a Rerun recording (``recording``) or one
self-contained HTML page (``html_page``); the episodes and their numbers are ``traces`` over the
sources in ``sources``; the command is ``command`` with its config in ``config`` (docs/view.md)."""
