"""The varying query: its data (`data`), the factored program (`program`, solved by `factored`), its long-context
form (`long_program`, solved by `long`), the unfactored fallback (`unfactored_program`, `unfactored`).
Map: `attncert.certify.second_order`."""
