# %% [markdown]
# # Will it fit? vramscope in a notebook
# Each `# %%` cell runs as written in Jupyter (a result as a cell's last expression shows a small
# table of all its runs; `r.report(i)` shows run i's full offline report); CI runs the file as a
# script. `help(vramscope.profile)` lists every keyword.

# %%
import vramscope

r = vramscope.profile(model="2.7B", device="meta", context_length=512, batch_size=4, profile_type="training", gpu="H100-80GB")
print(f"peak allocated {r.peak_allocated_gib:.2f} GiB, reserved {r.peak_reserved_gib:.2f} GiB (GiB = 1024³ B); OOM: {r.oom}")

# %% Where the memory is at the peak
for row in r.categories:
    print(f"{row['category']:>16}: {row['allocated_gib']:7.2f} GiB allocated")

# %% What bf16 mixed precision and checkpointing buy
c = vramscope.compare(model="2.7B", device="meta", context_length=512, batch_size=4, precision="bf16", checkpoint="blocks")
for row in c.rows:
    print(row["variant"], f"{row['peak_allocated_bytes'] / 1024**3:.2f} GiB")

# %% How many H100s under FSDP?
f = vramscope.fit(model="2.7B", find="world-size", context_length=512, batch_size=4, gpu="H100-80GB", parallel="fsdp")
print(f.data)

# %% The snapshot for pytorch.org/memory_viz, and the report
import tempfile, os
out = tempfile.mkdtemp()
print(r.save_snapshot(os.path.join(out, "2.7B_snapshot.pickle")), r.save_report(os.path.join(out, "2.7B_report.html")))
r  # in Jupyter: the table of runs, linking to the report saved above; r.report(0) shows it inline
