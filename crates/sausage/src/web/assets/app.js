/* The web console: see ARCHITECTURE.md. */
