-- Argo CD's health of a Troupe Gang (troupe.io/v1alpha1): the key
-- resource.customizations.health.troupe.io_Gang of argocd-cm (docs/guide/gitops.md).
--   Healthy      the members needed (the size, or the minimum) are bound to nodes (Bound=True)
--   Degraded     the gang is held until its members' own keys change (Stalled=True)
--   Progressing  anything else: waiting for members, for room, for preemption, for binding
-- Written for Argo CD's Lua (gopher-lua, Lua 5.1, run without the string library): plain
-- comparisons and concatenation only.
local hs = {}
local status = obj.status

local function condition(kind)
  if status == nil or status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function message(default)
  if status ~= nil and status.message ~= nil and status.message ~= "" then
    return status.message
  end
  return default
end

local stalled = condition("Stalled")
local bound = condition("Bound")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = message("Held")
elseif bound ~= nil and bound.status == "True" then
  hs.status = "Healthy"
  hs.message = message("Bound")
else
  hs.status = "Progressing"
  hs.message = message("Waiting for status")
end
return hs
