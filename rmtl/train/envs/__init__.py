"""The vec-env stack both stages train on: the env stack and its reward source, the worker
processes the sub-envs step in, the phase one-hot observation."""
