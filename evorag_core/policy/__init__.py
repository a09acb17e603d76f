"""The agent policy: the LM agent that picks SEARCH/BACKTRACK/ANSWER/REFUSE, its prompts, query generation and the LLM judge."""
