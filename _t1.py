import time,sys
from devalloc.testing import broken, explorer, scenarios
sc = scenarios.by_name("settle_lost")
t=time.time(); r = explorer.explore(sc, 20000); print("real", r.summary(), time.time()-t)
t=time.time(); r = explorer.explore(sc, 20000, overrides={"_find": broken.find_settle_gives_up}); print("broken", r.summary(), time.time()-t)
print(r.report()[:3000] if not r.ok else "")
