// Command gangcheck reads Gang objects (YAML files) the way two GitOps tools do and prints,
// for each file, one JSON line {"file", "status", "message"}:
//
//	gangcheck kstatus FILE...             kstatus' status.Compute (sigs.k8s.io/cli-utils), what
//	                                      Flux's health checks and kpt use for a kind they do
//	                                      not know: InProgress, Failed, Current, ...
//	gangcheck argocd-health SCRIPT FILE...  a health script run as Argo CD runs one: gopher-lua
//	                                      (Lua 5.1) with only the package, base and table
//	                                      libraries, the object as the global obj, one second
//	                                      at most, the returned table's status and message
//
// The Python tests under tests/ecosystem run it (it is built once into the cache by
// devtools/devcluster/ecosystem.py).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

type verdict struct {
	File    string `json:"file"`
	Status  string `json:"status"`
	Message string `json:"message"`
}

// Argo CD's health status codes; any other string is reported as Unknown, as Argo CD does.
var healthCodes = map[string]bool{
	"Healthy": true, "Progressing": true, "Degraded": true, "Suspended": true, "Missing": true, "Unknown": true,
}

func main() {
	if len(os.Args) < 3 {
		fail("usage: gangcheck kstatus FILE... | gangcheck argocd-health SCRIPT FILE...")
	}
	var err error
	switch os.Args[1] {
	case "kstatus":
		err = each(os.Args[2:], kstatusOf)
	case "argocd-health":
		if len(os.Args) < 4 {
			fail("usage: gangcheck argocd-health SCRIPT FILE...")
		}
		script, readErr := os.ReadFile(os.Args[2])
		if readErr != nil {
			fail(readErr.Error())
		}
		err = each(os.Args[3:], func(obj map[string]any) (string, string, error) {
			return argocdHealth(string(script), obj)
		})
	default:
		fail("unknown check " + os.Args[1])
	}
	if err != nil {
		fail(err.Error())
	}
}

func fail(message string) {
	fmt.Fprintln(os.Stderr, "gangcheck:", message)
	os.Exit(2)
}

func each(files []string, check func(map[string]any) (string, string, error)) error {
	out := json.NewEncoder(os.Stdout)
	for _, file := range files {
		obj, err := readObject(file)
		if err != nil {
			return err
		}
		code, message, err := check(obj)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if err := out.Encode(verdict{File: file, Status: code, Message: message}); err != nil {
			return err
		}
	}
	return nil
}

func readObject(file string) (map[string]any, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	asJSON, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	obj := map[string]any{}
	if err := json.Unmarshal(asJSON, &obj); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return obj, nil
}

func kstatusOf(obj map[string]any) (string, string, error) {
	// Integers as the API machinery holds them (int64), not JSON's float64.
	asJSON, err := json.Marshal(obj)
	if err != nil {
		return "", "", err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(asJSON); err != nil {
		return "", "", err
	}
	result, err := status.Compute(u)
	if err != nil {
		return "", "", err
	}
	return result.Status.String(), result.Message, nil
}

func argocdHealth(script string, obj map[string]any) (string, string, error) {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for name, open := range map[string]lua.LGFunction{
		lua.LoadLibName: lua.OpenPackage, lua.BaseLibName: lua.OpenBase, lua.TabLibName: lua.OpenTable,
	} {
		if err := L.CallByParam(lua.P{Fn: L.NewFunction(open), NRet: 0, Protect: true}, lua.LString(name)); err != nil {
			return "", "", err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	L.SetContext(ctx)
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(script); err != nil {
		return "", "", err
	}
	returned := L.Get(-1)
	table, ok := returned.(*lua.LTable)
	if !ok {
		if returned == lua.LNil {
			return "", "", nil
		}
		return "", "", fmt.Errorf("the script returned a %s, not a table", returned.Type())
	}
	code := lua.LVAsString(table.RawGetString("status"))
	message := lua.LVAsString(table.RawGetString("message"))
	if code != "" && !healthCodes[code] {
		return "Unknown", "invalid health status " + code, nil
	}
	return code, message, nil
}

// toLua makes a Lua value of a decoded JSON value: objects are tables with string keys,
// arrays are sequences from 1, numbers are numbers, null is nil.
func toLua(L *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case nil:
		return lua.LNil
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case []any:
		table := L.CreateTable(len(v), 0)
		for _, item := range v {
			table.Append(toLua(L, item))
		}
		return table
	case map[string]any:
		keys := make([]string, 0, len(v))
		for key := range v {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		table := L.CreateTable(0, len(v))
		for _, key := range keys {
			table.RawSetString(key, toLua(L, v[key]))
		}
		return table
	default:
		return lua.LString(fmt.Sprint(v))
	}
}
