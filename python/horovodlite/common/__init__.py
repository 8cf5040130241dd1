"""Framework-independent pieces shared by horovodlite's Python adapters."""
