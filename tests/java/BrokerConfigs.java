// IncrementalAlterConfigs on a broker resource with the Java Admin client: BROKER is a
// node id or "" (the cluster default, as kafka-configs.sh --entity-default sends it).
// Prints "OK", or "ERR <exception class> <message>". With --describe instead of NAME VALUE:
// "CONFIG name=value SOURCE" for every config DescribeConfigs returns.
// Usage: BrokerConfigs BOOTSTRAP BROKER (NAME VALUE|-  |  --describe)   ("-": DELETE)
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.common.config.ConfigResource;

public final class BrokerConfigs {
    public static void main(String[] args) throws Exception {
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, args[1]);
        if (args[2].equals("--describe")) {
            try (Admin admin = Admin.create(Check.props(args[0]))) {
                Config config = admin.describeConfigs(List.of(broker)).all().get(30, TimeUnit.SECONDS).get(broker);
                for (ConfigEntry e : config.entries()) {
                    Check.out("CONFIG " + e.name() + "=" + e.value() + " " + e.source());
                }
            }
            return;
        }
        boolean delete = args[3].equals("-");
        AlterConfigOp op = new AlterConfigOp(new ConfigEntry(args[2], delete ? null : args[3]),
                delete ? AlterConfigOp.OpType.DELETE : AlterConfigOp.OpType.SET);
        try (Admin admin = Admin.create(Check.props(args[0]))) {
            admin.incrementalAlterConfigs(Map.of(broker, List.of(op))).all().get(30, TimeUnit.SECONDS);
            Check.out("OK");
        } catch (ExecutionException e) {
            Check.out("ERR " + e.getCause().getClass().getSimpleName() + " " + e.getCause().getMessage());
        }
    }
}
