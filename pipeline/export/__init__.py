"""A store's episodes as other tools' datasets: Minari and LeRobot exports (``minari_export``,
``lerobot_export``) over one reading of episode rows (``episode_rows``, ``export_target``), and the
behaviour-cloning labels written as a Minari dataset (``bc_labels``)."""
