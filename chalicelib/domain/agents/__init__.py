"""Agents: standing instructions run on a schedule in the agent's timezone."""
