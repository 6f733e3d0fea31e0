"""The relaxation's rows: variables, weight rows, objective (`rows`), the facets of P (`facets`) and the loop that
chooses them (`cutting_planes`). Map: `attncert.certify.second_order`."""
