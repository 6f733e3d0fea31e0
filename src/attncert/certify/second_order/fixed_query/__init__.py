"""The fixed query: its program (`program`, solved by `monolithic`) and, above SEPARABLE_ABOVE keys, the token
program (`token_program`, `token_solve`, `token_family`) bounded through the support function of P
(`support_bound`) by `separable`. Map: `attncert.certify.second_order`."""
