"""Snakemake entry point: figures/tables/paper_vs_reproduced.{csv,md} from every stage's measurements."""
from attncert.pipeline.job_log import start_job_log
from attncert.pipeline.model_source import model_label
from attncert.pipeline.paper_comparison import comparison_table, load_measured
from attncert.pipeline.provenance import provenance, write_sidecar

sm = snakemake  # noqa: F821 - injected by Snakemake
start_job_log(sm.log[0])
table = comparison_table(sm.input.claims, load_measured(sm.input.measured))
table.to_csv(sm.output.csv, index=False)
model = model_label(sm.params.model)
counts = table["agree"].value_counts().to_dict()
md = [f"# Paper vs reproduced — our model: {model}\n",
      "The papers' numbers come from GPT-2 small (Paper A) and the authors' Min-IP setups (Paper B); ours from "
      f"the configuration of this run (model **{model}**; grid per row). A result on the embedded model is not a "
      "GPT-2 result: `agree` says whether ours agrees in the sense the paper claims (order, sign, ratio range; "
      "see data/paper_claims.yaml).\n", f"Agreement counts: {counts}\n",
      table.drop(columns=["sentence"]).to_markdown(index=False), "\n\n## Sentences\n"]
md += [f"- **{r.id}**: {r.sentence}" for r in table.itertuples()]
with open(sm.output.md, "w") as fh:
    fh.write("\n".join(md) + "\n")
write_sidecar(sm.output.csv, provenance(sm.params, stage="paper_vs_reproduced", inputs=list(sm.input.measured)))
