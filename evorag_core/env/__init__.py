"""The environment: actions, state, the seven reward signals, the weight schedule, judges, episodes and RagEnv."""
