"""Tool callers: the ``ToolCaller`` protocol (``protocol``) and its implementations:
typed Python skills (``skills``), several callers behind one (``composite``),
MCP servers (``mcp``) and a plain chat-model client (``llm``).
Public names are exported from ``actors``.
"""
