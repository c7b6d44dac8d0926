"""Tool callers: the ``ToolCaller`` protocol (``protocol``) and its implementations:
typed Python skills (``skills``), several callers behind one (``composite``), another run
as a tool (``nested``), MCP servers (``mcp``) and a plain chat-model client (``llm``).
Public names are exported from ``actors``.
"""
